"""/serve/<tenant>/<project>/<endpoint>/…: the gateway (endpoints/gateway.py)."""

from django.urls import path

from endpoints.gateway import serve

app_name = "serve"

urlpatterns = [
    path("<slug:tenant>/<slug:project>/<slug:endpoint>/", serve, name="endpoint_root"),
    path("<slug:tenant>/<slug:project>/<slug:endpoint>/<path:path>", serve, name="endpoint"),
]
