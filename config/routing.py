"""Websocket routes. Apps with consumers add their patterns here."""

from django.urls import re_path

from jobs.consumers import JobLogConsumer
from jobs.proxy_consumers import NotebookProxyConsumer

websocket_urlpatterns = [
    # A job page's live log, metrics and status (jobs/consumers.py).
    re_path(r"^ws/jobs/(?P<pk>\d+)/$", JobLogConsumer.as_asgi()),
    # JupyterLab's kernels, terminals and events, relayed to the job's notebook server.
    re_path(r"^jobs/(?P<pk>\d+)/lab/(?P<path>.*)$", NotebookProxyConsumer.as_asgi()),
]
