"""Websocket routes. Apps with consumers add their patterns here."""

from django.urls import re_path

from interactive.terminal_consumers import JobTerminalConsumer
from jobs.consumers import JobLogConsumer

websocket_urlpatterns = [
    # A job page's live log, metrics and status (jobs/consumers.py).
    re_path(r"^ws/jobs/(?P<pk>\d+)/$", JobLogConsumer.as_asgi()),
    # A terminal inside a running job (interactive/terminal_consumers.py).
    re_path(r"^ws/jobs/(?P<pk>\d+)/terminal/$", JobTerminalConsumer.as_asgi()),
    # JupyterLab's websockets are served from the notebook origin (interactive/origin.py).
]
