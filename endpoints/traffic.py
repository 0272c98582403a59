"""What the gateway records of each request (status and timing, never bodies), and the
figures the endpoint page and the API show from it.

A request is added to this process's buffer on the request path (no database write
there); the buffer is written in one transaction per FLUSH_SECONDS at
most, in a worker thread: the rows of the requests' log, trimmed to the last
LOG_LENGTH per endpoint, and the per-version totals. What is still in the buffer when the
web server stops is written then: uvicorn's graceful stop sends the ASGI lifespan's
shutdown (endpoints.asgi.Lifespan), a gunicorn worker's ends its interpreter normally
(atexit). uvicorn kills itself with the signal it was stopped by after its shutdown, so
atexit alone would not run there. A SIGKILL loses them (never the answers).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import defaultdict
from datetime import timedelta

from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import F
from django.utils import timezone

from endpoints.models import Endpoint, EndpointRequest, EndpointVersionStats

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
LOG_LENGTH = 1000  # requests kept per endpoint

_buffer: list[EndpointRequest] = []
_lock = threading.Lock()
_flushing = threading.Event()
_state = {"last_flush": time.monotonic(), "timer": None}


def record(endpoint_pk, version_number, canary, method, path, status, started, cold) -> None:
    """Note one request (called on the request path: memory only)."""
    latency = (time.perf_counter() - started) * 1000
    row = EndpointRequest(
        endpoint_id=endpoint_pk,
        at=timezone.now(),
        version_number=version_number,
        canary=canary,
        method=method[:8],
        path=path[:200],
        status=status,
        latency_ms=latency,
        cold_start=cold,
    )
    with _lock:
        _buffer.append(row)
        due = time.monotonic() - _state["last_flush"] >= FLUSH_SECONDS
        if not due and _state["timer"] is None:
            timer = threading.Timer(FLUSH_SECONDS, _flush_in_thread)
            timer.daemon = True
            _state["timer"] = timer
            timer.start()
    if due:
        _flush_later()


@atexit.register
def flush_pending() -> None:
    """Write what is buffered, at a server's stop."""
    with _lock:
        if not _buffer:
            return
    try:
        flush()
    except Exception as exc:  # at exit, the database may be gone first
        logger.warning("endpoint traffic: the last requests' records are lost: %s", exc)


def _flush_later() -> None:
    if not _flushing.is_set():
        _flushing.set()
        threading.Thread(target=_flush_in_thread, name="endpoint-traffic", daemon=True).start()


def _flush_in_thread() -> None:
    try:
        flush()
    finally:
        _flushing.clear()
        close_old_connections()


def flush() -> int:
    """Write the buffered requests; how many."""
    with _lock:
        rows, _buffer[:] = list(_buffer), []
        _state["last_flush"] = time.monotonic()
        timer, _state["timer"] = _state["timer"], None
    if timer is not None:
        timer.cancel()
    if not rows:
        return 0
    totals: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for row in rows:
        if row.version_number is not None:
            total = totals[(row.endpoint_id, row.version_number)]
            total[0] += 1
            total[1] += row.status >= 400
            total[2] += row.latency_ms
    wanted = {r.endpoint_id for r in rows}
    try:
        _write(rows, totals, wanted)
    except IntegrityError:
        # An endpoint deleted meanwhile where rows cannot be locked (SQLite): its rows
        # failed the foreign key; once more, without it.
        for row in rows:
            row.pk = None
        _write(rows, totals, wanted)
    return len(rows)


@transaction.atomic
def _write(rows, totals, wanted: set[int]) -> None:
    # The endpoints locked first (PostgreSQL): a delete that locked one first is waited
    # for here, and its endpoint left out; one that comes after waits for this commit and
    # takes these rows with it (EndpointQuerySet.delete_locked).
    existing = set(
        Endpoint.objects.select_for_update().filter(pk__in=wanted).values_list("pk", flat=True)
    )
    EndpointRequest.objects.bulk_create([r for r in rows if r.endpoint_id in existing])
    for (endpoint_pk, number), (count, errors, latency) in totals.items():
        if endpoint_pk not in existing:
            continue
        stats, _ = EndpointVersionStats.objects.get_or_create(
            endpoint_id=endpoint_pk, version_number=number
        )
        EndpointVersionStats.objects.filter(pk=stats.pk).update(
            requests=F("requests") + count,
            errors=F("errors") + errors,
            latency_ms_total=F("latency_ms_total") + latency,
        )
    for endpoint_pk in existing:
        _trim(endpoint_pk)


def _trim(endpoint_pk: int) -> None:
    keep = LOG_LENGTH
    cut = (
        EndpointRequest.objects.filter(endpoint_id=endpoint_pk)
        .order_by("-at", "-pk")
        .values_list("pk", flat=True)[keep : keep + 1]
    )
    cut = list(cut)
    if cut:
        EndpointRequest.objects.filter(endpoint_id=endpoint_pk, pk__lte=cut[0]).delete()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary(endpoint: Endpoint) -> list[dict]:
    """Per version: requests and errors in total, error rate, and p50/p99 latency of the
    logged (most recent) requests."""
    recent: dict[int, list[float]] = defaultdict(list)
    for number, latency in endpoint.requests.exclude(version_number=None).values_list(
        "version_number", "latency_ms"
    ):
        recent[number].append(latency)
    out = []
    for stats in endpoint.stats.order_by("version_number"):
        latencies = recent.get(stats.version_number, [])
        out.append(
            {
                "version": stats.version_number,
                "requests": stats.requests,
                "errors": stats.errors,
                "error_rate": stats.errors / stats.requests if stats.requests else 0.0,
                "p50_ms": percentile(latencies, 50),
                "p99_ms": percentile(latencies, 99),
            }
        )
    return out


def per_minute(endpoint: Endpoint, minutes: int = 60) -> dict:
    """Requests, errors and p50 latency per minute over the logged requests, per version
    (the page's charts)."""
    since = timezone.now() - timedelta(minutes=minutes)
    buckets: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for at, number, status, latency in endpoint.requests.filter(at__gte=since).values_list(
        "at", "version_number", "status", "latency_ms"
    ):
        minute = at.replace(second=0, microsecond=0).isoformat()
        buckets[number or 0][minute].append((status, latency))
    series = {}
    for number, by_minute in buckets.items():
        series[f"v{number}" if number else "gateway"] = [
            {
                "minute": minute,
                "requests": len(calls),
                "errors": sum(1 for s, _ in calls if s >= 400),
                "p50_ms": percentile([lat for _, lat in calls], 50),
            }
            for minute, calls in sorted(by_minute.items())
        ]
    return series
