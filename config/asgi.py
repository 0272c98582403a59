"""ASGI entry point: Django's own ASGI application for HTTP, Channels for websockets.

`make run` serves everything from this one application under uvicorn. In production the
proxy sends pages and the API to the WSGI application (config/wsgi.py, under gunicorn)
and only websockets here (platform/nginx/, platform/k8s/). Notebooks have an origin and
an ASGI application of their own (interactive/origin.py).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.core.asgi import get_asgi_application

django_asgi_app = get_asgi_application()  # django.setup(), before anything imports models

from accounts.websocket_auth import TokenAuthMiddleware  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from endpoints.asgi import GatewayFirst, lifespan  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Model endpoints' token calls (/serve/…) skip Django's middleware (endpoints/asgi.py).
        "http": GatewayFirst(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            # A session cookie (browsers) or `Authorization: Bearer gty_…` (the gantry CLI).
            AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
        # The server's start and graceful stop (uvicorn --lifespan on).
        "lifespan": lifespan,
    }
)
