"""Websocket routes. Apps with consumers add their patterns here."""

from django.urls import re_path

from jobs.consumers import JobLogConsumer
from jobs.terminal_consumers import JobTerminalConsumer

websocket_urlpatterns = [
    # A job page's live log, metrics and status (jobs/consumers.py).
    re_path(r"^ws/jobs/(?P<pk>\d+)/$", JobLogConsumer.as_asgi()),
    # A terminal inside a running job (jobs/terminal_consumers.py).
    re_path(r"^ws/jobs/(?P<pk>\d+)/terminal/$", JobTerminalConsumer.as_asgi()),
    # JupyterLab's websockets are served from the notebook origin (jobs/notebook_origin.py).
]
