"""Generations: numbers in the shared cache (Redis) that committed changes move on.

A cache entry is stored with the generations current when its rows were read; an entry
whose generations are no longer current is never used, only replaced. So one `changed`
makes every entry of its kind stale at once, without finding them. The access cache
(projects.permissions) and API tokens (accounts.authentication) use them.
"""

import time
from functools import partial

from django.core.cache import cache
from django.db import transaction


def key(name: str) -> str:
    return f"{name}:generation"


def changed(name: str) -> None:
    """Move `name` on once the current transaction commits (now, outside one). `robust`:
    a cache that cannot be reached must not turn a committed change into an error."""
    transaction.on_commit(partial(_next, name), robust=True)


def _next(name: str) -> None:
    try:
        cache.incr(key(name))
    except ValueError:  # not set yet (or evicted): a new value no entry carries
        cache.set(key(name), time.time_ns(), None)


def read(names, *keys) -> tuple[tuple, dict]:
    """The current generations of `names` and the values of `keys`, in one round trip.
    A generation not set yet is started, and reads as None for this time."""
    found = cache.get_many([*map(key, names), *keys])
    current = tuple(found.get(key(name)) for name in names)
    for name, value in zip(names, current, strict=True):
        if value is None:
            cache.add(key(name), time.time_ns(), None)
    return current, found


def storable(current: tuple) -> bool:
    """May rows read now be kept under these generations? Not when one was missing, and
    not inside a transaction (the rows may be its own uncommitted changes)."""
    return None not in current and not transaction.get_connection().in_atomic_block
