"""Background work for sweeps (django-q2): the controller pass, per sweep and for all.

A minute is django-q's finest schedule; a trial's state change (`job_transitioned`) and
its metrics (`metrics_reported`) queue a pass for its sweep at once, at most one every
GANTRY_SWEEP_KICK_SECONDS per sweep where the cache is shared (Redis).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache

from core.schedules import register_minute_schedules
from sweeps.controller import control_sweep as _control
from sweeps.models import FINISHED_STATES, Sweep, Trial

logger = logging.getLogger(__name__)

SCHEDULES = {"sweeps: control": ("sweeps.tasks.control_all", 1)}


def control_sweep(sweep_id: int) -> str:
    return _control(sweep_id)


def control_all() -> int:
    """A pass for every sweep not yet finished (the backstop behind the kicks)."""
    ids = list(Sweep.objects.exclude(state__in=FINISHED_STATES).values_list("pk", flat=True))
    for sweep_id in ids:
        try:
            _control(sweep_id)
        except Exception:  # one broken sweep must not stop the others' passes
            logger.exception("sweep %s: controller pass failed", sweep_id)
    return len(ids)


def queue_control(sweep_id: int) -> None:
    from django_q.tasks import async_task

    seconds = getattr(settings, "GANTRY_SWEEP_KICK_SECONDS", 2)
    if settings.REDIS_URL and seconds and not cache.add(f"sweeps:kick:{sweep_id}", 1, timeout=seconds):
        return
    try:
        async_task("sweeps.tasks.control_sweep", sweep_id, task_name=f"sweeps: control #{sweep_id}")
    except Exception:  # the broker being down must not break the request or ingestion
        logger.warning("could not queue sweep %s's controller pass", sweep_id, exc_info=True)


def _sweep_of(job) -> int | None:
    sweep_id = (
        Trial.objects.filter(job_id=job.pk).exclude(sweep__state__in=FINISHED_STATES)
        .values_list("sweep_id", flat=True).first()
    )
    return sweep_id


def on_job_transitioned(sender, job, event, **kwargs) -> None:
    sweep_id = _sweep_of(job)
    if sweep_id is not None:
        queue_control(sweep_id)


def on_metrics_reported(sender, job, names, **kwargs) -> None:
    sweep_id = _sweep_of(job)
    if sweep_id is not None and Sweep.objects.filter(pk=sweep_id, objective__in=list(names)).exists():
        queue_control(sweep_id)


def register_schedules(**kwargs) -> None:
    register_minute_schedules(SCHEDULES)
