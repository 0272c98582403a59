"""The websocket half of the notebook origin (the HTTP half, and why, is `interactive.proxy`).

JupyterLab talks to kernels, terminals and its event bus over websockets under
``/jobs/<id>/lab/``. `interactive.origin` has already read the notebook session
cookie and checked the Origin header (a page of another origin, a sibling notebook
included, cannot open a socket with the cookie); it hands the socket here with the
session in ``scope["notebook"]``. This consumer checks `job.exec` in the database,
opens the same path on the notebook server with the token added, and relays frames
both ways until either side closes.

A socket outlives the check made when it opened: between frames, at most every
GANTRY_WS_RECHECK_SECONDS, access is asked again, and a user no longer allowed
(4403) loses the kernel or terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time

import websockets
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from interactive import proxy

logger = logging.getLogger(__name__)

CLOSE_FORBIDDEN = 4403  # may not exec in this job (any more)
CLOSE_NOT_FOUND = 4404  # no running notebook
CLOSE_UNAVAILABLE = 1011  # the notebook server refused or did not answer
OPEN_TIMEOUT = 10.0
# Kernel messages carry outputs (images, tables); Jupyter's own limit is 10 MiB by default.
MAX_FRAME = 64 * 1024 * 1024


def _sendable(code: int | None) -> int:
    """A close code we may send on (1005, 1006 and 1015 only describe what happened)."""
    if code is not None and (code in (1000, 1001, 1008, 1011) or 3000 <= code <= 4999):
        return code
    return 1000 if code == 1005 else CLOSE_UNAVAILABLE


def _check(session: proxy.NotebookSession):
    return proxy.lookup(session.user, session.job, session.auth_hash)


async def _unix_socket(target) -> dict:
    """connect()'s arguments for a notebook on a Unix socket: a socket connected through
    the checked descriptor (proxy.open_notebook_socket)."""
    fd = proxy.open_notebook_socket(target)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, f"/proc/self/fd/{fd}")
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(fd)
    return {"unix": True, "sock": sock}


class NotebookProxyConsumer(AsyncWebsocketConsumer):
    """Relay one websocket between a browser and the job's notebook server."""

    # No channel layer: nothing is sent to these sockets from elsewhere.
    channel_layer_alias = "notebook-proxy-needs-none"

    job = None
    upstream = None
    relay = None
    client_gone = False
    revoked = False

    async def connect(self):
        notebook = self.scope["notebook"]
        self.session = notebook["session"]
        try:
            self.job, target = await database_sync_to_async(_check)(self.session)
        except Http404:
            return await self.refuse(CLOSE_NOT_FOUND)
        except PermissionDenied:
            return await self.refuse(CLOSE_FORBIDDEN)

        query = self.scope.get("query_string", b"").decode("latin-1")
        url = target.url("ws", notebook["path"], query)
        try:
            via = await _unix_socket(target) if target.uds else {}
            self.upstream = await connect(
                url,
                **via,
                additional_headers={"Authorization": f"token {target.token}"},
                subprotocols=self.scope.get("subprotocols") or None,
                open_timeout=OPEN_TIMEOUT,
                max_size=MAX_FRAME,
                compression=None,  # a local hop: not worth the CPU
                proxy=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            logger.info("notebook refused websocket %s: HTTP %s", notebook["path"], status)
            return await self.refuse(CLOSE_NOT_FOUND if status == 404 else CLOSE_UNAVAILABLE)
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            logger.warning("notebook of job %s is not answering: %r", self.session.job, exc)
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
        try:
            await database_sync_to_async(_check)(self.session)
            return self.revoked
        except (Http404, PermissionDenied):
            pass
        if self.revoked:
            return True
        self.revoked = True
        await self.close(code=CLOSE_FORBIDDEN)
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
