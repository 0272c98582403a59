"""A terminal inside a running job over a websocket: ``ws/jobs/<id>/terminal/``.

Query: ``worker=<rank>`` (default 0); ``command=<JSON list of strings>`` runs that one
command instead of a shell (``gantry exec``); ``cols``/``rows`` the first window size.
Signed in by the session cookie (the job page) or an ``Authorization: Bearer gty_…``
header on the handshake (the CLI), with the `job.exec` permission: a viewer is closed
with 4403, an outsider (or a job that does not exist) with 4404, an anonymous socket
with 4401, a bad query with 4400, a job that is not running (or a worker whose command
is not) with 4409. The reason comes first as a text frame ``{"error": "..."}``.

Frames: binary both ways are terminal bytes; text frames are JSON control messages,
from the client ``{"resize": [cols, rows]}``, from the server ``{"exit": <code>}`` just
before it closes (1000). Access and the job's state are checked again every
GANTRY_WS_RECHECK_SECONDS: the terminal ends (exit 137 when it had to be killed) when
the job ends or the user loses `job.exec`. Every session opened is in the audit log
(``job.exec``: the worker, the command or "shell", session or token).

The process itself (a pty in the job's sandbox, or the Kubernetes exec API) is
interactive/terminal.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404

from core import audit
from interactive import terminal
from jobs.consumers import lost_access
from jobs.models import Job, JobWorker
from jobs.states import JobState
from projects.permissions import get_object_for_user

logger = logging.getLogger(__name__)

CLOSE_BAD_QUERY = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_NOT_RUNNING = 4409
MAX_COMMAND_BYTES = 16384


def parse_terminal_query(raw: bytes, workers: int) -> tuple[int, list[str] | None, int, int]:
    """(worker rank, command or None, cols, rows); ValueError with the reason."""
    query = {k: v[-1] for k, v in parse_qs(raw.decode(errors="replace")).items()}
    try:
        rank = int(query.get("worker", "0"))
    except ValueError:
        raise ValueError("worker must be a worker's rank (a number)") from None
    if not 0 <= rank < workers:
        raise ValueError(f"this job has workers 0 to {workers - 1}, not {rank}")
    command = None
    if "command" in query:
        if len(query["command"]) > MAX_COMMAND_BYTES:
            raise ValueError(f"command is longer than {MAX_COMMAND_BYTES} bytes")
        try:
            command = json.loads(query["command"])
        except ValueError:
            command = None
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(a, str) and "\x00" not in a for a in command)
        ):
            raise ValueError('command must be a JSON list of strings, e.g. ["ls", "-l"]')
    size = []
    for name, default in (("cols", 80), ("rows", 24)):
        try:
            size.append(min(max(int(query.get(name, default)), 1), 1000))
        except ValueError:
            raise ValueError(f"{name} must be a number") from None
    return rank, command, size[0], size[1]


def job_for_exec(user, pk: int, token=None) -> tuple[Job, int]:
    """The job (Http404 / PermissionDenied as the matrix says) and its worker count."""
    job = get_object_for_user(user, Job, "job.exec", token=token, pk=pk)
    return job, job.workers


def running_worker(job_pk: int, rank: int) -> tuple[Job, JobWorker]:
    job = Job.objects.select_related("project__tenant").get(pk=job_pk)
    if job.state != JobState.RUNNING:
        raise terminal.TerminalError(f"the job is {job.get_state_display().lower()}, not running")
    try:
        return job, JobWorker.objects.get(job=job, rank=rank)
    except JobWorker.DoesNotExist:
        raise terminal.TerminalError(f"the job has no worker {rank}") from None


def job_state(pk: int) -> str | None:
    return Job.objects.filter(pk=pk).values_list("state", flat=True).first()


class JobTerminalConsumer(AsyncWebsocketConsumer):
    """One terminal (a browser's xterm.js or `gantry shell`) in one worker of a job."""

    channel_layer_alias = "terminal-needs-none"  # no group: bytes go to one socket only
    session = None
    pump: asyncio.Task | None = None
    token = None  # the API token that signed the socket in, if not a session

    async def connect(self):
        await self.accept()  # then close with a code the client can read
        user = self.scope.get("user")
        # A session, or an API token (accounts.websocket_auth puts it in the scope).
        self.token = self.scope.get("api_token")
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_UNAUTHENTICATED, "Sign in, or send an API token.")
        self.user = user
        try:
            pk = int(self.scope["url_route"]["kwargs"]["pk"])
            job, workers = await database_sync_to_async(job_for_exec)(user, pk, self.token)
        except (Http404, ValueError):
            return await self.refuse(CLOSE_NOT_FOUND, "No such job.")
        except PermissionDenied:
            return await self.refuse(
                CLOSE_FORBIDDEN,
                "You may not open a terminal in this job: that takes the job.exec "
                "permission (the job's submitter or a project maintainer, with a "
                "read-write token).",
            )
        try:
            rank, command, cols, rows = parse_terminal_query(self.scope["query_string"], workers)
        except ValueError as exc:
            return await self.refuse(CLOSE_BAD_QUERY, str(exc))
        try:
            job, worker = await database_sync_to_async(running_worker)(job.pk, rank)
            self.session = terminal.open_session(job, worker, command)
            await self.session.start(cols, rows)
        except terminal.TerminalError as exc:
            self.session = None
            return await self.refuse(CLOSE_NOT_RUNNING, str(exc))
        self.job, self.rank, self.command = job, rank, command
        await database_sync_to_async(audit.record)(
            user,
            "job.exec",
            job,
            worker=rank,
            command=command or "shell",
            via="token" if self.token else "session",
        )
        self.pump = asyncio.create_task(self.relay())

    async def refuse(self, code: int, detail: str) -> None:
        await self.send(text_data=json.dumps({"error": detail}))
        await self.close(code=code)

    async def relay(self):
        """Output to the socket until the process ends, the job ends or access goes."""
        watcher = asyncio.create_task(self.watch())
        try:
            while (data := await self.session.output.get()) is not None:
                await self.send(bytes_data=data)
            code = await self.session.wait()
        finally:
            watcher.cancel()
        await self.send(text_data=json.dumps({"exit": code}))
        await self.close(code=1000)

    async def watch(self):
        """Every GANTRY_WS_RECHECK_SECONDS: the job still running, the user still allowed."""
        while True:
            await asyncio.sleep(settings.GANTRY_WS_RECHECK_SECONDS)
            state = await database_sync_to_async(job_state)(self.job.pk)
            if state != JobState.RUNNING or await self.access_lost():
                self.session.close()
                return

    async def access_lost(self) -> bool:
        def check(user):
            get_object_for_user(user, Job, "job.exec", token=self.token, pk=self.job.pk)

        return await database_sync_to_async(lost_access)(self.scope, check) is not None

    async def receive(self, text_data=None, bytes_data=None):
        if self.session is None:
            return
        if bytes_data is not None:
            self.session.write(bytes_data)
            return
        try:
            message = json.loads(text_data or "")
            cols, rows = message["resize"]
            self.session.resize(min(max(int(cols), 1), 1000), min(max(int(rows), 1), 1000))
        except (ValueError, TypeError, KeyError):
            # Text that is not a control message is typed text (a client without
            # binary frames): pass it on as the user's bytes.
            self.session.write((text_data or "").encode())

    async def disconnect(self, code):
        if self.session is not None:
            self.session.close()
        if self.pump is not None and not self.pump.done():
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
