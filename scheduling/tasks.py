"""Scheduling's background work (django-q2). The admission pass runs as jobs' task
`jobs.tasks.admit_and_launch` (every minute, and queued by `jobs.tasks.kick` after a submit
or when capacity was freed), which calls this through `core.registry.admit_and_launch`
(registered in scheduling/apps.py)."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache

from jobs.tasks import KICK_PENDING, LAST_KICKED_PASS, launch_admitted
from scheduling.admission import admission_pass


def admit_and_launch(kicked: bool = False) -> dict:
    """Admit what fits, then start every admitted job's executors."""
    if settings.REDIS_URL and kicked:
        # Under a stream of submits a pass over a long queue would run back to back
        # (a quarter of a core in the load benchmark): wait out the interval since the
        # last kicked pass, while kicks keep coalescing into this one.
        last = cache.get(LAST_KICKED_PASS)
        if last is not None:
            time.sleep(
                min(max(0.0, last + settings.GANTRY_ADMISSION_KICK_SECONDS - time.time()), 60)
            )
        cache.set(LAST_KICKED_PASS, time.time(), timeout=3600)
        cache.delete(KICK_PENDING)  # submits from now on need a pass after this one
    admitted = admission_pass()
    return {"admitted": len(admitted), "launched": launch_admitted()}
