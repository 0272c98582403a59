"""The gateway's front door under an ASGI server: token calls to /serve/… go straight to
`endpoints.gateway.handle`, past Django's middleware stack.

Django's middleware here is synchronous (sessions, CSRF, messages, axes…): under ASGI each
request through it hops into Django's one thread for sync code, so concurrent calls to
a model queue behind each other there. A call with `Authorization: Bearer …` needs none of
it (no cookie, no page): this application authorizes it with the same functions as the
view (a repeated call from what endpoints.admissions remembers, on the event loop), and
streams nothing it has not read. Everything else — browser sessions (the "try it" form),
pages, the API — goes to Django as before.
"""

from __future__ import annotations

from urllib.parse import unquote

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from endpoints import gateway, services, traffic

PREFIX = "/serve/"


class GatewayFirst:
    """ASGI: /serve/ calls with a bearer token to the gateway, the rest to `app`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        secret = _bearer(headers.get("authorization", ""))
        parts = scope["path"][len(PREFIX) :].split("/", 3)
        if secret is None or len(parts) < 3 or not _allowed_host(headers.get("host", "")):
            # Django answers these: a page, the API, or 400 for a host not in ALLOWED_HOSTS.
            return await self.app(scope, receive, send)
        tenant, project, name = (unquote(p) for p in parts[:3])
        body = await _read_body(receive)
        if body is None:
            return  # the client went away
        call = gateway.Call(
            scope["method"],
            unquote(parts[3]) if len(parts) > 3 else "",
            body,
            headers.get("content-type", "").split(";")[0].strip(),
        )
        answer = await gateway.handle(
            lambda: gateway.authorize_secret(secret, tenant, project, name),
            call,
            key=(services.hash_secret(secret), tenant, project, name),
        )
        response_headers = [
            (b"content-type", answer.content_type.encode("latin-1")),
            (b"content-length", str(len(answer.content)).encode()),
            *(
                (k.lower().encode("latin-1"), str(v).encode("latin-1"))
                for k, v in answer.headers.items()
            ),
        ]
        await send(
            {"type": "http.response.start", "status": answer.status, "headers": response_headers}
        )
        await send({"type": "http.response.body", "body": answer.content})


def _allowed_host(host: str) -> bool:
    """Django's own ALLOWED_HOSTS check (what `request.get_host()` does)."""
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def _bearer(header: str) -> str | None:
    parts = header.split()
    if len(parts) == 2 and parts[0].lower() in ("bearer", "token"):
        return parts[1]
    return None


async def _read_body(receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= gateway.MAX_BODY + 1:
            chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def lifespan(scope, receive, send):
    """ASGI lifespan (uvicorn --lifespan on): at the server's graceful stop, the gateway's
    buffered request records are written (endpoints.traffic)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await sync_to_async(traffic.flush_pending, thread_sensitive=False)()
            await send({"type": "lifespan.shutdown.complete"})
            return
