"""The websocket half of the notebook proxy (the HTTP half, and why, is `jobs.proxy`).

JupyterLab talks to kernels, terminals and its event bus over websockets under
``/jobs/<id>/lab/``. This consumer checks the user the same way the HTTP view
does, opens the same path on the notebook server with the token added, and
relays frames both ways until either side closes.

A socket outlives the check made when it opened: between frames, at most every
GANTRY_WS_RECHECK_SECONDS, the user's access is asked again (as for the live log), and
a user signed out (4401) or no longer allowed (4403) loses the kernel or terminal.

Cross-site websocket hijacking is stopped before this consumer runs:
`config.asgi` wraps every websocket route in `AllowedHostsOriginValidator`, so
a page on another origin cannot open a socket with the user's session cookie.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import websockets
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from jobs import proxy
from jobs.consumers import lost_access

logger = logging.getLogger(__name__)

CLOSE_FORBIDDEN = 4403  # not signed in
CLOSE_NOT_FOUND = 4404  # no such job for this user, or no running notebook
CLOSE_UNAVAILABLE = 1011  # the notebook server refused or did not answer
OPEN_TIMEOUT = 10.0
# Kernel messages carry outputs (images, tables); Jupyter's own limit is 10 MiB by default.
MAX_FRAME = 64 * 1024 * 1024


def _sendable(code: int | None) -> int:
    """A close code we may send on (1005, 1006 and 1015 only describe what happened)."""
    if code is not None and (code in (1000, 1001, 1008, 1011) or 3000 <= code <= 4999):
        return code
    return 1000 if code == 1005 else CLOSE_UNAVAILABLE


class NotebookProxyConsumer(AsyncWebsocketConsumer):
    """Relay one websocket between a browser and the job's notebook server."""

    job = None
    upstream = None
    relay = None
    client_gone = False
    revoked = False

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_FORBIDDEN)
        kwargs = self.scope["url_route"]["kwargs"]
        try:
            self.job, target = await database_sync_to_async(proxy.lookup)(user, int(kwargs["pk"]))
        except Http404:
            return await self.refuse(CLOSE_NOT_FOUND)
        except PermissionDenied:
            return await self.refuse(CLOSE_FORBIDDEN)

        query = self.scope.get("query_string", b"").decode("latin-1")
        url = target.url("ws", kwargs["path"], query)
        try:
            self.upstream = await connect(
                url,
                additional_headers={"Authorization": f"token {target.token}"},
                subprotocols=self.scope.get("subprotocols") or None,
                open_timeout=OPEN_TIMEOUT,
                max_size=MAX_FRAME,
                compression=None,  # a local hop: not worth the CPU
                proxy=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            logger.info("notebook refused websocket %s: HTTP %s", kwargs["path"], status)
            return await self.refuse(CLOSE_NOT_FOUND if status == 404 else CLOSE_UNAVAILABLE)
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            logger.warning("notebook of job %s is not answering: %r", kwargs["pk"], exc)
            return await self.refuse(CLOSE_UNAVAILABLE)

        await self.accept(subprotocol=self.upstream.subprotocol)
        self.checked_at = time.monotonic()
        self.relay = asyncio.create_task(self.relay_upstream())

    async def access_lost(self) -> bool:
        """May the user still use this notebook? When not, close both sides."""
        if self.revoked:
            return True
        if time.monotonic() - self.checked_at < settings.GANTRY_WS_RECHECK_SECONDS:
            return False
        self.checked_at = time.monotonic()
        pk = self.job.pk
        code = await database_sync_to_async(lost_access)(
            self.scope, lambda user: proxy.get_job_for_user(user, pk)
        )
        if code is None or self.revoked:
            return self.revoked
        self.revoked = True
        await self.close(code=code)
        await self.upstream.close()
        return True

    async def refuse(self, code: int):
        # Accept first: a handshake refused before accepting reaches the browser as a bare
        # HTTP 403, while a close frame carries the code (4403 / 4404) to the page.
        await self.accept()
        await self.close(code=code)

    async def relay_upstream(self):
        code = None
        try:
            async for message in self.upstream:
                if await self.access_lost():
                    return
                if isinstance(message, str):
                    await self.send(text_data=message)
                else:
                    await self.send(bytes_data=message)
            code = self.upstream.close_code
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
        finally:
            if not (self.client_gone or self.revoked):
                await self.close(code=_sendable(code))

    async def receive(self, text_data=None, bytes_data=None):
        if self.upstream is None or await self.access_lost():
            return
        # Running cells and typing go over this socket only: it counts as use.
        if proxy.activity_due(self.job.pk):
            await database_sync_to_async(proxy.record_activity)(self.job)
        with contextlib.suppress(ConnectionClosed):  # the relay task closes the browser side
            await self.upstream.send(text_data if text_data is not None else bytes_data)

    async def disconnect(self, code):
        self.client_gone = True
        if self.upstream is not None:
            await self.upstream.close()
        if self.relay is not None:
            try:
                await asyncio.wait_for(self.relay, timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                self.relay.cancel()
