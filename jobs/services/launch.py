"""Launching an admitted job and the executor's credentials: job-scoped tokens and the
spec an executor fetches when it starts."""

from __future__ import annotations

import hmac
import logging
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from jobs import states
from jobs.compute import get_backend
from jobs.models import Job, JobKind, JobWorker
from jobs.services.lifecycle import end_attempt
from jobs.states import JobState, transition

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "gjt_"


def make_token(rank: int, secret: str) -> str:
    """An executor token: `gjt_<rank>_<secret>`. All workers of an attempt share the secret
    (its sha256 is on the Job); the rank tells the spec endpoint which worker asks."""
    return f"{TOKEN_PREFIX}{rank}_{secret}"


def parse_token(token: str) -> tuple[int, str] | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    rank, _, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not rank.isdigit() or not secret:
        return None
    return int(rank), secret


def launch_job(job: Job) -> bool:
    """admitted -> starting, then start the executors. False if another launcher won."""
    backend = get_backend(job.backend)
    # Only a backend that hands out devices itself waits for them (on Kubernetes the
    # device plugin picks the GPUs and the cluster's scheduler waits for room).
    holder = device_holder(job) if getattr(backend, "assigns_devices", True) else None
    if holder is not None:
        reason = f"admitted; starts when job #{holder.pk} has stopped and freed its devices"
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).exclude(state_reason=reason).update(
            state_reason=reason
        )
        return False
    secret = secrets.token_urlsafe(32)
    placement = dict(job.placement)
    if job.kind == JobKind.DISTRIBUTED:
        from core.ports import free_port

        placement["master_port"] = free_port()
    n = job.workers
    if not transition(
        job,
        JobState.STARTING,
        f"starting {n} worker{'s' if n > 1 else ''}",
        token_hash=Job.hash_token(secret),
        placement=placement,
        cancel_requested_at=None,
        preempt_requested_at=None,
    ):
        return False
    now = timezone.now()
    JobWorker.objects.filter(job=job).update(
        state="starting",
        exit_code=None,
        reason="",
        pid=None,
        pid_start_time=None,
        child_pid=None,
        child_start_time=None,
        launched_at=now,
        last_heartbeat_at=None,
    )
    try:
        backend.launch(job, lambda rank: make_token(rank, secret))
    except Exception as exc:
        logger.exception("could not launch job %s", job.pk)
        backend.kill(job)
        job.refresh_from_db()
        end_attempt(job, JobState.FAILED, f"could not start: {exc}")
    return True


def record_worker_process(
    worker: JobWorker,
    *,
    pid: int,
    pid_start_time: int | None,
    workdir: str,
    notebook_token: str | None = None,
) -> None:
    """A backend started a worker's executor: its process (pid and start time, so a
    reused pid is never mistaken for it), its working directory and, for a notebook, the
    token the proxy presents (no host and port: JupyterLab listens on a socket in the
    workdir). Backends record what they start through here, never by saving a worker."""
    worker.pid, worker.pid_start_time, worker.workdir = pid, pid_start_time, workdir
    fields = ["pid", "pid_start_time", "workdir"]
    if notebook_token is not None:
        worker.host, worker.port, worker.notebook_token = "", None, notebook_token
        fields += ["host", "port", "notebook_token"]
    worker.save(update_fields=fields)


def devices_overlap(a: dict, b: dict) -> bool:
    """Do two placements share a GPU index or CPU slot on the same node? (A placement is
    the node, GPU indices and CPU slots each worker rank holds:
    `placement["hosts" | "gpus" | "cpus"][rank]`, written by admission.)"""

    def held(p):
        hosts = p.get("hosts") or {}
        out = set()
        for kind in ("gpus", "cpus"):
            for rank, ids in (p.get(kind) or {}).items():
                out.update((kind, hosts.get(rank), i) for i in ids)
        return out

    return not held(a).isdisjoint(held(b))


def device_holder(job: Job) -> Job | None:
    """A launched job still holding GPUs or CPU slots promised to `job` (a job being
    preempted for it, within its grace period), or None."""
    if not job.placement:
        return None
    others = (
        Job.objects.filter(state__in=states.LAUNCHED, backend=job.backend)
        .exclude(pk=job.pk)
        .only("pk", "placement")
    )
    return next((o for o in others if devices_overlap(o.placement, job.placement)), None)


def executor_job(job_id: int, token: str) -> tuple[Job, int] | None:
    """The job and worker rank a token is good for, or None.

    Valid while the job runs and for GANTRY_JOB_TOKEN_GRACE_MINUTES after it ended;
    never for another job (the caller answers 404 either way).
    """
    parsed = parse_token(token)
    if parsed is None:
        return None
    rank, secret = parsed
    job = Job.objects.filter(pk=job_id).select_related("project").first()
    if job is None or not job.token_hash:
        return None
    if not hmac.compare_digest(Job.hash_token(secret), job.token_hash):
        return None
    if job.is_terminal:
        grace = timedelta(minutes=settings.GANTRY_JOB_TOKEN_GRACE_MINUTES)
        if job.finished_at is None or timezone.now() - job.finished_at > grace:
            return None
    if rank >= job.workers:
        return None
    return job, rank


def job_spec_for_executor(job: Job, rank: int) -> dict[str, Any]:
    from django.urls import reverse

    from datasets.services.inputs import inputs_for_executor

    backend = get_backend(job.backend)
    worker = JobWorker.objects.get(job=job, rank=rank)
    JobWorker.objects.filter(pk=worker.pk).update(last_heartbeat_at=timezone.now())
    return {
        "job": job.pk,
        "attempt": job.attempt,
        "kind": job.kind,
        "command": backend.command(job, worker),
        "env": backend.environment(job, worker),
        "timeout_seconds": job.timeout_seconds,
        "grace_seconds": settings.GANTRY_JOB_GRACE_SECONDS,
        "heartbeat_seconds": settings.GANTRY_HEARTBEAT_SECONDS,
        "outputs_dir": job.outputs_dir,
        "inputs": inputs_for_executor(
            job, lambda pk: reverse("executor-dataset-file", args=[job.pk, pk])
        ),
        # The manifest of the job's code (executor/code.py stages it before the inputs).
        "code": reverse("executor-code", args=[job.pk]) if job.code_snapshot_id else None,
    }
