"""Live job pages over websockets: log lines, metric points and status changes.

Senders pick the group, one per job (`job-<id>`): `jobs.services.ingest_logs` and
`ingest_metrics` and `jobs.states.transition` call the `publish_*` functions
after their transaction commits, and apps above jobs call `publish_panel` when a
panel of theirs on the page changed (`checkpoints.services.commit_checkpoint`).
Storage stays the source of truth: the consumer backfills from it on connect and
whenever a live message shows a gap (a message the layer dropped, or one sent before
this socket joined), so a client that resumes with `?after=` gets every line once,
in seq order per worker; the page refetches its panels after a reconnect.

The consumer also re-reads the job from the database every POLL_SECONDS. With the
embedded in-process channel layer, messages sent by the django-q worker process
(admission and launch move jobs to admitted and starting) never reach the web
process; the poll brings those status changes, and any stored lines or points a
message did not bring, a few seconds late. With REDIS_URL every process
publishes through Redis and the poll finds nothing to do.

Protocol, server to client (JSON):
    {"type": "status", "state", "label", "badge", "reason", "terminal", "events": [...]}
    {"type": "lines", "lines": [{"worker", "seq", "stream", "ts", "text"}, ...], "live"}
    {"type": "truncated", "worker", "before"}   lines before `before` were not sent
    {"type": "metrics", "points": [{"worker", "seq", "name", "step", "value", "ts"}, ...]}
    {"type": "caught_up"}                         the backfill is done; live from here
    {"type": "panel", "panel"}                    a panel of the page changed: refetch it
Query: `worker` = a rank or `all` (default); `after` = a seq (for every selected worker)
or `0:120,1:98` per rank (absent: the recent tail); `metrics_after` likewise (absent: all
points, at most METRIC_BACKFILL_MAX); `events_after` = the last timeline event the page has.
Close codes: 4401 not signed in, 4404 no such job (or not yours), 4400 bad query;
on an open socket, 4401 signed out (logout, deactivation, a password change) and 4403
no longer allowed to watch (removed from the project or tenant, the project made private).

Access is checked at connect and again before anything is forwarded, at most every
GANTRY_WS_RECHECK_SECONDS (default 10): the user held in the scope caches its roles
for the socket's whole life, so the re-check reads fresh rows. A user who loses access
may still receive up to that many seconds of lines; an idle socket costs no queries.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import re
import time
from importlib import import_module
from types import SimpleNamespace
from urllib.parse import parse_qs

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user
from django.core.exceptions import PermissionDenied
from django.http import Http404

from jobs.models import Job, JobEvent, JobWorker, MetricPoint
from jobs.queries import count_lines_after, log_lines, tail_lines
from jobs.states import BADGES, TERMINAL, JobState
from projects.permissions import get_object_for_user

logger = logging.getLogger(__name__)

BACKFILL_TAIL = 1000  # lines a fresh page gets; older ones load on demand
BACKFILL_MAX = 50_000  # most lines one resume sends per worker; beyond, `truncated`
MESSAGE_LINES = 1000
METRIC_BACKFILL_MAX = 50_000
POLL_SECONDS = 2.0
PANEL = re.compile(r"[a-z][a-z-]{0,39}")  # becomes the page's event `job-panel-<name>`

CLOSE_BAD_QUERY = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


def group_name(job_id: int) -> str:
    return f"job-{job_id}"


# --- senders ----------------------------------------------------------------------------


def publish(job_id: int, message: dict) -> None:
    """Send to the job's group; never fails the caller (storage already has the data)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group_name(job_id), message)
    except Exception:
        logger.warning("could not publish %s for job %s", message["type"], job_id, exc_info=True)


def publish_lines(job_id: int, worker: int, lines: list[dict]) -> None:
    # Serialized once here, forwarded as is by every consumer: at 20,000 lines/s the
    # per-line encoding (JSON, then the layer's msgpack, then JSON again per viewer)
    # is what a single web process runs out of.
    payload = json.dumps(
        [
            {
                "worker": worker,
                "seq": ln["seq"],
                "stream": ln["stream"],
                "ts": ln.get("ts"),
                "text": ln["text"],
            }
            for ln in lines
        ],
        ensure_ascii=False,
    )
    publish(
        job_id,
        {
            "type": "job.lines",
            "worker": worker,
            "first": lines[0]["seq"],
            "last": lines[-1]["seq"],
            "json": payload,
        },
    )


def publish_metrics(job_id: int, worker: int, points: list[MetricPoint]) -> None:
    publish(
        job_id,
        {"type": "job.metrics", "worker": worker, "points": [_point(p) for p in points]},
    )


def publish_status(job, event: JobEvent) -> None:
    publish(
        job.pk,
        {
            "type": "job.status",
            # The event's, not the job object's: it may have moved on by commit time.
            "state": event.to_state,
            "reason": event.reason,
            "events": [_event(event)],
        },
    )


def publish_panel(job_id: int, panel: str) -> None:
    """Tell the job's pages that one of its panels changed (`checkpoints`: one was
    committed); the page refetches that panel. Apps above jobs name their own panels."""
    if not PANEL.fullmatch(panel):
        raise ValueError(f"a panel is named in lowercase letters and dashes, not {panel!r}")
    publish(job_id, {"type": "job.panel", "panel": panel})


def _point(p: MetricPoint) -> dict:
    return {
        "worker": p.worker,
        "seq": p.seq,
        "name": p.name,
        "step": p.step,
        "value": p.value,
        "ts": p.ts.timestamp() if p.ts else None,
    }


def _event(e: JobEvent) -> dict:
    return {
        "id": e.pk,
        "at": e.at.isoformat(),
        "from": e.from_state,
        "to": e.to_state,
        "reason": e.reason,
        "actor": e.actor.username if e.actor_id and e.actor else None,
    }


def status_message(state: str, reason: str, events: list[dict]) -> dict:
    return {
        "type": "status",
        "state": state,
        "label": JobState(state).label,
        "badge": BADGES.get(state, "text-bg-secondary"),
        "reason": reason,
        "terminal": state in TERMINAL,
        "events": events,
    }


# --- reading storage (run in a thread) ----------------------------------------------------


def parse_cursors(raw: str | None, workers: list[int]) -> dict[int, int] | None:
    """`120` (every worker) or `0:120,1:98`; None when absent. ValueError when malformed."""
    if raw is None or raw == "":
        return None
    if ":" not in raw:
        seq = int(raw)
        if seq < 0:
            raise ValueError("after must not be negative")
        return dict.fromkeys(workers, seq)
    cursors = dict.fromkeys(workers, 0)
    for part in raw.split(","):
        rank, _, seq = part.partition(":")
        rank, seq = int(rank), int(seq)
        if seq < 0:
            raise ValueError("after must not be negative")
        if rank in cursors:
            cursors[rank] = seq
    return cursors


def backlog(job: Job, worker: int, after: int | None) -> tuple[list[dict], int | None]:
    """Stored lines of one worker after `after` (None: the recent tail).

    Returns (lines, truncated_before): when older lines exist that are not sent, the
    seq before which the client must ask the API for them.
    """
    if after is None:
        lines = tail_lines(job, worker=worker, count=BACKFILL_TAIL)
        return lines, (lines[0]["seq"] if lines and lines[0]["seq"] > 1 else None)
    if count_lines_after(job, worker=worker, after=after) > BACKFILL_MAX + MESSAGE_LINES:
        lines = tail_lines(job, worker=worker, count=BACKFILL_MAX)
        return lines, (lines[0]["seq"] if lines else None)
    return log_lines(job, worker=worker, after=after, limit=BACKFILL_MAX + MESSAGE_LINES), None


def stored_points(job: Job, cursors: dict[int, int]) -> list[dict]:
    points: list[dict] = []
    for worker, after in cursors.items():
        rows = (
            MetricPoint.objects.filter(job=job, worker=worker, seq__gt=after)
            .order_by("-seq")
            .values_list("worker", "seq", "name", "step", "value", "ts")[:METRIC_BACKFILL_MAX]
        )
        points.extend(
            {"worker": w, "seq": s, "name": n, "step": st, "value": v, "ts": ts.timestamp()}
            for w, s, n, st, v, ts in reversed(rows)
        )
    return points


def job_snapshot(job_id: int, workers: list[int], events_after: int):
    """What the poll compares: state, reason, new timeline events, stored seqs per worker."""
    state, reason = Job.objects.filter(pk=job_id).values_list("state", "state_reason").get()
    events = [
        _event(e)
        for e in JobEvent.objects.filter(job_id=job_id, pk__gt=events_after).select_related("actor")
    ]
    seqs = {
        rank: (log_seq + offset, metric_seq)  # the stored numbering (Gantry's lines too)
        for rank, log_seq, offset, metric_seq in JobWorker.objects.filter(
            job_id=job_id, rank__in=workers
        ).values_list("rank", "last_log_seq", "log_seq_offset", "last_metric_seq")
    }
    return state, reason, events, seqs


def last_event_id(job: Job) -> int:
    return job.events.order_by("-pk").values_list("pk", flat=True).first() or 0


class _SessionCopy(dict):
    """A session's data for `django.contrib.auth.get_user` to read: what it would write
    back (a flush on a bad hash, a new key on a fallback secret) stays in the copy."""

    def flush(self):
        self.clear()

    def cycle_key(self):
        pass


def lost_access(scope, check) -> int | None:
    """The close code for a socket whose user may no longer use it, else None.

    The connect-time checks again on fresh rows: the session still signs in the same
    active user (Django's own rules: logout, expiry, deactivation, a changed password),
    and `check(user)` (the socket's own permission lookup) raises neither Http404 nor
    PermissionDenied. The notebook proxy's sockets ask the same.
    """
    held = scope["user"]
    if scope.get("api_token") is not None:  # signed in by a token (the CLI), not a session
        from accounts.websocket_auth import token_still_valid

        user = token_still_valid(scope["api_token"])
        if user is None or user.pk != held.pk:
            return CLOSE_UNAUTHENTICATED
        try:
            check(user)
        except (Http404, PermissionDenied):
            return CLOSE_FORBIDDEN
        return None
    session_key = scope["session"].session_key if "session" in scope else None
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    user = get_user(SimpleNamespace(session=_SessionCopy(data)))
    if not (user.is_authenticated and user.is_active and user.pk == held.pk):
        return CLOSE_UNAUTHENTICATED
    try:
        check(user)
    except (Http404, PermissionDenied):
        return CLOSE_FORBIDDEN
    return None


# --- the consumer -------------------------------------------------------------------------


class JobLogConsumer(AsyncJsonWebsocketConsumer):
    """One browser tab watching one job (ws/jobs/<id>/)."""

    job: Job | None = None
    poller: asyncio.Task | None = None
    closing = False

    async def connect(self):
        # Accept before closing, so the browser sees the close code (a refused
        # handshake is only an HTTP 403 to it) and knows not to reconnect.
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        try:
            pk = int(self.scope["url_route"]["kwargs"]["pk"])
            self.job = await database_sync_to_async(get_object_for_user)(
                user, Job, "job.view", token=self.scope.get("api_token"), pk=pk
            )
        except (Http404, PermissionDenied, ValueError):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.checked_at = time.monotonic()
        try:
            await self.parse_query()
        except ValueError as exc:
            await self.send_json({"type": "error", "detail": str(exc)})
            await self.close(code=CLOSE_BAD_QUERY)
            return
        self.lock = asyncio.Lock()
        self.behind: dict[str, dict[int, int]] = {"lines": {}, "metrics": {}}
        self.group = group_name(self.job.pk)
        # Join first, backfill second: a line committed in between arrives both ways
        # and the seq cursors drop the second copy.
        await self.channel_layer.group_add(self.group, self.channel_name)
        async with self.lock:
            await self.send_json(status_message(self.state, self.reason, []))
            await self.send_backlog(self.log_after)
            await self.send_points(self.metric_after)
            await self.send_json({"type": "caught_up"})
        self.poller = asyncio.create_task(self.poll())

    async def parse_query(self):
        query = {k: v[-1] for k, v in parse_qs(self.scope["query_string"].decode()).items()}
        raw_worker = query.get("worker", "all")
        if raw_worker == "all":
            self.workers = list(range(self.job.workers))
        else:
            rank = int(raw_worker)
            if not 0 <= rank < self.job.workers:
                raise ValueError(f"this job has no worker {rank}")
            self.workers = [rank]
        self.log_after = parse_cursors(query.get("after"), self.workers)
        self.metric_after = parse_cursors(
            query.get("metrics_after"), self.workers
        ) or dict.fromkeys(self.workers, 0)
        self.state, self.reason = self.job.state, self.job.state_reason
        if query.get("events_after", "") != "":
            self.events_after = int(query["events_after"])
        else:
            self.events_after = await database_sync_to_async(last_event_id)(self.job)
        # Cursors: the last seq sent per worker.
        self.log_cursor = dict.fromkeys(self.workers, 0)
        self.metric_cursor = dict(self.metric_after)

    async def disconnect(self, code):
        if self.poller is not None:
            self.poller.cancel()
        if self.job is not None and hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass  # the client only listens

    async def access_lost(self) -> bool:
        """Before forwarding: may the user still watch? When not, leave and close (4401/4403).

        Asked of the database at most every GANTRY_WS_RECHECK_SECONDS.
        """
        if self.closing:
            return True
        interval = settings.GANTRY_WS_RECHECK_SECONDS
        if time.monotonic() - self.checked_at < interval:
            return False
        self.checked_at = time.monotonic()
        pk = self.job.pk
        code = await database_sync_to_async(lost_access)(
            self.scope,
            lambda user: get_object_for_user(
                user, Job, "job.view", token=self.scope.get("api_token"), pk=pk
            ),
        )
        if code is None or self.closing:
            return self.closing
        self.closing = True
        await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.close(code=code)
        return True

    # -- backfill --------------------------------------------------------------------

    async def send_backlog(self, after: dict[int, int] | None, workers=None):
        workers = workers or self.workers
        per_worker = []
        for w in workers:
            start = None if after is None else after[w]
            lines, truncated = await database_sync_to_async(backlog)(self.job, w, start)
            if truncated is not None:
                await self.send_json({"type": "truncated", "worker": w, "before": truncated})
            lines = [ln for ln in lines if ln["seq"] > self.log_cursor[w]]
            if lines:
                self.log_cursor[w] = lines[-1]["seq"]
                per_worker.append(lines)
        merged = (
            per_worker[0]
            if len(per_worker) == 1
            else list(heapq.merge(*per_worker, key=lambda ln: ln.get("ts") or 0))
        )
        for i in range(0, len(merged), MESSAGE_LINES):
            await self.send_json(
                {"type": "lines", "lines": merged[i : i + MESSAGE_LINES], "live": False}
            )

    async def send_points(self, after: dict[int, int]):
        points = await database_sync_to_async(stored_points)(self.job, after)
        points = [p for p in points if p["seq"] > self.metric_cursor[p["worker"]]]
        for p in points:
            self.metric_cursor[p["worker"]] = max(self.metric_cursor[p["worker"]], p["seq"])
        for i in range(0, len(points), 5000):
            await self.send_json({"type": "metrics", "points": points[i : i + 5000]})

    # -- live messages from the group ---------------------------------------------------

    async def job_lines(self, event):
        w = event["worker"]
        if w not in self.log_cursor:
            return
        async with self.lock:
            if await self.access_lost():
                return
            if event["last"] <= self.log_cursor[w]:
                return  # the backfill or the poll already sent these
            if event["first"] > self.log_cursor[w] + 1:
                # A gap: lines this socket missed (dropped, or sent before it joined).
                await self.send_backlog(dict(self.log_cursor), workers=[w])
                if event["last"] <= self.log_cursor[w]:
                    return
            if event["first"] == self.log_cursor[w] + 1:
                self.log_cursor[w] = event["last"]
                await self.send(
                    text_data=f'{{"type": "lines", "live": true, "lines": {event["json"]}}}'
                )
                return
            fresh = [ln for ln in json.loads(event["json"]) if ln["seq"] > self.log_cursor[w]]
            self.log_cursor[w] = fresh[-1]["seq"]
            await self.send_json({"type": "lines", "lines": fresh, "live": True})

    async def job_metrics(self, event):
        w = event["worker"]
        if w not in self.metric_cursor:
            return
        async with self.lock:
            if await self.access_lost():
                return
            points = event["points"]
            if points and points[0]["seq"] > self.metric_cursor[w] + 1:
                await self.send_points({w: self.metric_cursor[w]})
            fresh = [p for p in points if p["seq"] > self.metric_cursor[w]]
            if fresh:
                self.metric_cursor[w] = fresh[-1]["seq"]
                await self.send_json({"type": "metrics", "points": fresh})

    async def job_status(self, event):
        async with self.lock:
            if await self.access_lost():
                return
            events = [e for e in event["events"] if e["id"] > self.events_after]
            if events:  # else the poll already brought it: a late message must not go back
                await self.apply_status(event["state"], event["reason"], events)

    async def job_panel(self, event):
        async with self.lock:
            if await self.access_lost():
                return
            await self.send_json({"type": "panel", "panel": event["panel"]})

    async def apply_status(self, state, reason, events):
        if not events and (state, reason) == (self.state, self.reason):
            return
        if events:
            self.events_after = events[-1]["id"]
        self.state, self.reason = state, reason
        await self.send_json(status_message(state, reason, events))

    # -- the poll ---------------------------------------------------------------------

    async def poll(self):
        try:
            while not self.closing:
                # A finished job changes rarely (late log lines, a retry): look less often.
                await asyncio.sleep(POLL_SECONDS * (5 if self.state in TERMINAL else 1))
                await self.poll_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("live poll of job %s failed", self.job.pk)

    async def poll_once(self):
        async with self.lock:
            state, reason, events, seqs = await database_sync_to_async(job_snapshot)(
                self.job.pk, self.workers, self.events_after
            )
            # Stored but not sent, twice in a row: no message is coming for it.
            lag_lines = {w: s[0] for w, s in seqs.items() if s[0] > self.log_cursor[w]}
            stuck_lines = [w for w in lag_lines if self.behind["lines"].get(w, 0) > 0]
            lag_points = {w: s[1] for w, s in seqs.items() if s[1] > self.metric_cursor[w]}
            stuck_points = [w for w in lag_points if self.behind["metrics"].get(w, 0) > 0]
            self.behind = {"lines": lag_lines, "metrics": lag_points}
            news = events or (state, reason) != (self.state, self.reason)
            if (news or stuck_lines or stuck_points) and await self.access_lost():
                return
            await self.apply_status(state, reason, events)
            if stuck_lines:
                await self.send_backlog(dict(self.log_cursor), workers=stuck_lines)
            if stuck_points:
                await self.send_points({w: self.metric_cursor[w] for w in stuck_points})
