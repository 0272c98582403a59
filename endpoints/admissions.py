"""Who may call which endpoint, and what it serves, remembered in this process for TTL
seconds: the gateway's answer to a repeated call costs no database query.

An entry is the database's answer for one bearer token's hash and one gateway path: the
endpoint (its serving versions and settings) and the versions its aliases point at. The
staleness is bounded by TTL: a revoked token, a deleted endpoint, a caller removed from
the project, a changed rate limit or a moved alias take effect in every web process
within TTL seconds (in the process that made the change at once: services and rollout
call `forget`). TTL is below rollout.DRAIN_SECONDS, so a process that still routes to
the version an alias left finds its replica running.

Only admissions are kept, never refusals: a token made a moment ago works at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from endpoints.models import Endpoint
from modelhub.models import ModelVersion

TTL = 1.0
MAX_ENTRIES = 10_000
clock = time.monotonic  # the tests move it on instead of sleeping


@dataclass(frozen=True)
class Admission:
    """A caller's leave to call `endpoint`, read from the database (shared, read-only)."""

    endpoint: Endpoint
    primary: ModelVersion | None
    canary: ModelVersion | None
    expires: float


_entries: dict[tuple, Admission] = {}
_lock = threading.Lock()
_generation = [0]


def get(key: tuple) -> Admission | None:
    entry = _entries.get(key)
    if entry is None or entry.expires <= clock():
        return None
    return entry


def generation() -> int:
    """Read before the database: `put` keeps an answer only if no `forget` came between."""
    return _generation[0]


def put(key: tuple, admission: Admission, read_at_generation: int) -> None:
    now = clock()
    with _lock:
        if read_at_generation != _generation[0]:
            return  # the endpoint changed while it was read: the next call reads again
        if len(_entries) >= MAX_ENTRIES:
            for old in [k for k, e in _entries.items() if e.expires <= now]:
                del _entries[old]
            if len(_entries) >= MAX_ENTRIES:
                _entries.clear()
        _entries[key] = admission


def admission(endpoint: Endpoint, primary, canary) -> Admission:
    return Admission(endpoint, primary, canary, clock() + TTL)


def forget(endpoint_pk: int | None = None) -> None:
    """Drop what this process knows of the endpoint (of all, with None)."""
    with _lock:
        _generation[0] += 1
        for key in [k for k, e in _entries.items() if endpoint_pk in (None, e.endpoint.pk)]:
            del _entries[key]
