"""Background work for jobs (django-q2). Each task is a plain function that tests call directly.

Schedules are registered by code (`register_schedules`, run after every migrate):
admission and reconcile every minute, cleanup hourly. A minute is django-q's
finest schedule, so submits and finished jobs also `kick()` an immediate
admission pass.
"""

from __future__ import annotations

import logging
import shutil
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from core import registry
from core.schedules import register_minute_schedules
from jobs.compute import get_backend
from jobs.models import Job
from jobs.services.launch import launch_job
from jobs.services.lifecycle import reconcile_job
from jobs.states import LAUNCHED, TERMINAL, JobState

logger = logging.getLogger(__name__)

SCHEDULES = {
    # name: (function, minutes between runs)
    "jobs: admit and launch": ("jobs.tasks.admit_and_launch", 1),
    "jobs: reconcile": ("jobs.tasks.reconcile", 1),
    "jobs: clean up workdirs": ("jobs.tasks.cleanup", 60),
}


# Set while a kicked pass waits in the broker (only with a cache all processes share),
# and when the last kicked pass started.
KICK_PENDING = "jobs:admission-kick-pending"
LAST_KICKED_PASS = "jobs:admission-last-kicked-pass"


def kick() -> None:
    """Queue an admission pass now (after a submit, or when capacity was freed).

    A burst of submits needs one pass, not one each: with Redis as the cache, a kick
    made while another waits to start adds nothing (the waiting pass will see this
    submit too), and kicked passes start at most every GANTRY_ADMISSION_KICK_SECONDS.
    The flag expires, so a pass lost with a killed worker blocks nothing.
    """
    from django_q.tasks import async_task

    try:
        if settings.REDIS_URL and not cache.add(KICK_PENDING, 1, timeout=30):
            return
        async_task(admit_and_launch, kicked=True, task_name="jobs: admit and launch (kick)")
    except Exception:  # the broker being down must not break the request that kicked
        logger.warning("could not queue an admission pass", exc_info=True)


def admit_and_launch(kicked: bool = False) -> dict:
    """Admit what fits, then start every admitted job's executors. Who fits is scheduling's
    business (above jobs): it provides the pass, `core.registry.admit_and_launch`."""
    return registry.admit_and_launch(kicked=kicked)


def launch_admitted() -> int:
    """Start every admitted job's executors (scheduling's pass runs this after admitting)."""
    launched = 0
    backends = set()
    admitted = Job.objects.filter(state=JobState.ADMITTED).select_related(
        "project__tenant", "image_record"
    )
    for job in admitted.order_by("admitted_at", "pk"):
        if launch_job(job):
            launched += 1
            backends.add(job.backend)
    for name in backends:  # a backend that creates concurrently reports its outcomes
        finish = getattr(get_backend(name), "finish_launches", None)
        if finish is not None:
            finish()
    return launched


def reconcile() -> dict:
    """Lost workers, memory limits, server-side timeouts, stuck cancels, idle notebooks."""
    now = timezone.now()
    outcomes: dict[str, int] = {}
    for job in Job.objects.filter(state__in=LAUNCHED).select_related("project"):
        try:
            outcome = reconcile_job(job, now)
        except Exception:
            logger.exception("reconcile failed for job %s", job.pk)
            continue
        if outcome:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def adopt() -> dict:
    """After the worker (re)starts: keep executors that still run, mark the rest lost."""
    outcomes: dict[str, int] = {}
    for job in Job.objects.filter(state__in=LAUNCHED):
        try:
            outcome = reconcile_job(job, adopting=True) or "adopted"
        except Exception:
            logger.exception("adopt failed for job %s", job.pk)
            continue
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def cleanup() -> int:
    """Delete the workdirs of jobs that finished more than the retention period ago
    (or no longer exist). Outputs are already in storage; logs in the database."""
    root = Path(settings.GANTRY_JOBS_DIR)
    if not root.is_dir():
        return 0
    cutoff = timezone.now() - timedelta(hours=settings.GANTRY_JOB_WORKDIR_RETENTION_HOURS)
    ids = [int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()]
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=ids).only("state", "finished_at")}
    removed = 0
    for job_id in ids:
        job = jobs.get(job_id)
        if job is not None and (
            job.state not in TERMINAL or not job.finished_at or job.finished_at > cutoff
        ):
            continue
        shutil.rmtree(root / str(job_id), ignore_errors=True)
        removed += 1
    return removed


def register_schedules(**kwargs) -> None:
    """Create or update the django-q Schedule rows (idempotent; a post_migrate handler)."""
    register_minute_schedules(SCHEDULES)


def on_worker_spawn(**kwargs) -> None:
    """django-q started a worker process: adopt the executors a previous one left running,
    then queue an admission pass if jobs wait. A worker killed mid-dispatch leaves jobs
    admitted (or its queued kicks locked in the broker for `retry` seconds): without this
    they would wait for the next scheduled pass."""
    try:
        adopt()
    except Exception:
        logger.exception("adopting running jobs failed")
    try:
        if Job.objects.filter(state__in=(JobState.QUEUED, JobState.ADMITTED)).exists():
            kick()
    except Exception:
        logger.exception("queueing an admission pass after a worker start failed")
