"""ASGI entry point: HTTP through Django, websockets through Channels' URL router."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings
from django.core.asgi import get_asgi_application

get_asgi_application()  # django.setup(), before anything imports models

from config.routing import websocket_urlpatterns  # noqa: E402
from core.asgi import FreezeLongLivedObjects, SyncRequestHandler  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": FreezeLongLivedObjects(SyncRequestHandler(settings.GANTRY_REQUEST_CONCURRENCY)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# What importing made lives as long as the process: out of the collector's way now, and
# what the first requests make once they have been served (FreezeLongLivedObjects).
gc.collect()
gc.freeze()
