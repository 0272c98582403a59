"""The notebook proxy's HTTP routes, included by config/urls.py at the site root.

Its websocket route (same paths) is in config/routing.py.
"""

from django.urls import path

from jobs.proxy import notebook_proxy

urlpatterns = [
    path("jobs/<int:pk>/lab/", notebook_proxy, name="notebook_proxy_root"),
    path("jobs/<int:pk>/lab/<path:path>", notebook_proxy, name="notebook_proxy"),
]
