"""Websocket routes. Apps with consumers add their patterns here."""

from django.urls import re_path

from jobs.consumers import JobLogConsumer

websocket_urlpatterns = [
    # A job page's live log, metrics and status (jobs/consumers.py).
    re_path(r"^ws/jobs/(?P<pk>\d+)/$", JobLogConsumer.as_asgi()),
    # JupyterLab's websockets are served from the notebook origin (jobs/notebook_origin.py).
]
