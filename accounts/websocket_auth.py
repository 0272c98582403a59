"""Websockets signed in by a personal API token: the `gantry` CLI's `logs -f` and `shell`.

A browser's socket carries the session cookie (Channels' AuthMiddlewareStack); a terminal
client sends `Authorization: Bearer gty_…` on the handshake instead. This middleware sits
inside AuthMiddlewareStack: when the session signed no one in, an active token signs the
socket in as its user and leaves the token in `scope["api_token"]`, so consumers apply its
project and scope as the API does (`get_object_for_user(..., token=...)`) and re-check it
while the socket is open (`token_still_valid`).
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware

from accounts.authentication import token_by_hash
from accounts.models import ApiToken


def bearer_key(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            key = key.strip()
            if scheme.lower() in ("bearer", "token") and key.startswith(ApiToken.PREFIX):
                return key
    return None


def active_token(key: str) -> ApiToken | None:
    token = token_by_hash(ApiToken.hash_key(key))
    if token is None or not token.is_active or not token.user.is_active:
        return None
    return token


def token_still_valid(token: ApiToken):
    """The token's user when the token still works (not revoked, expired, or its user
    deactivated), read from fresh rows; else None."""
    fresh = ApiToken.objects.active().select_related("user").filter(pk=token.pk).first()
    if fresh is None or not fresh.user.is_active:
        return None
    return fresh.user


class TokenAuthMiddleware(BaseMiddleware):
    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if scope["type"] == "websocket" and (user is None or not user.is_authenticated):
            key = bearer_key(scope)
            token = await database_sync_to_async(active_token)(key) if key else None
            if token is not None:
                scope = dict(scope, user=token.user, api_token=token)
        return await super().__call__(scope, receive, send)
