"""A job's life after submit: cancel, preempt, requeue, end an attempt, settle from the
workers' outcomes, reconcile with the processes and the clock.

Every change of `Job.state` goes through `jobs.states.transition`; backends report what
they learn through `report_backend_problem`, never by writing a job."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core import audit
from jobs import states
from jobs.compute import get_backend
from jobs.models import Job, JobEvent, JobKind, JobWorker
from jobs.states import JobState, transition
from projects.permissions import require

WORKER_DONE = ("succeeded", "failed", "cancelled", "timed_out", "lost")


def _note(job: Job, reason: str, actor=None) -> None:
    """A timeline entry that is not a state change (a cancel request, a kill)."""
    JobEvent.objects.create(
        job=job,
        from_state=job.state,
        to_state=job.state,
        reason=reason[:500],
        actor=actor if getattr(actor, "pk", None) else None,
    )


def note_job(job: Job, reason: str) -> None:
    """A timeline entry from an app above jobs (telemetry's idle-GPU warning)."""
    _note(job, reason)


def report_backend_problem(job: Job, reason: str, *, terminal: bool) -> bool:
    """What a backend learned about a launched job that no executor can report, because
    none runs yet (the cluster refuses to create its pods, no node takes them).

    `terminal=False`: the job keeps starting and shows `reason` (a timeline entry once
    per distinct reason). `terminal=True`: the attempt fails with `reason`, retried like
    any failed attempt while retries remain; the backend deletes what it created.
    Backends never change a job's state themselves: this is their way to ask.
    Returns True when something changed."""
    reason = reason[:500]
    job.refresh_from_db()
    if job.state not in states.LAUNCHED:
        return False
    if not terminal:
        changed = (
            Job.objects.filter(pk=job.pk, state=JobState.STARTING)
            .exclude(state_reason=reason)
            .update(state_reason=reason)
        )
        if changed:
            job.state_reason = reason
            _note(job, reason)
        return bool(changed)
    unfinished = JobWorker.objects.filter(job=job).exclude(state__in=WORKER_DONE)
    if not unfinished.update(state="failed", reason=reason):
        return False
    settle_job(job)
    return True


def cluster_stopped_reason(job: Job, reason: str) -> str:
    """The reason of a worker whose executor was stopped (SIGTERM) by no request of
    Gantry's: a node drained, a pod evicted or preempted by the cluster, a host shut down."""
    where = "the cluster" if job.backend == "kubernetes" else "something outside Gantry"
    detail = reason.removeprefix("cancelled: ").strip() or "no detail"
    return f"stopped by {where} ({detail})"


def cancel_job(actor, job: Job, reason: str | None = None) -> Job:
    """Cancel a job: at once if nothing runs yet, otherwise ask its executors to stop.

    A running job stays `running` until its executors report back (or reconcile's
    backstop gives up waiting); its reason says the cancel is under way.
    """
    if actor is not None:
        require(actor, "job.cancel", job)
    who = getattr(actor, "username", None) or "Gantry"
    reason = reason or f"cancelled by {who}"
    for _ in range(5):
        job.refresh_from_db()
        if job.is_terminal:
            raise ValidationError(
                f"Job #{job.pk} has already finished ({job.get_state_display().lower()})."
            )
        if job.state in (JobState.QUEUED, JobState.ADMITTED):
            if transition(job, JobState.CANCELLED, reason, actor=actor):
                if actor is not None:
                    audit.record(actor, "job.cancel", job)
                return job
            continue  # lost a race with admission or launch: look again
        with transaction.atomic():
            first = Job.objects.filter(pk=job.pk, cancel_requested_at__isnull=True).update(
                cancel_requested_at=timezone.now(), state_reason=f"{reason}; stopping"
            )
            if first:
                _note(job, f"{reason}: stopping the processes", actor)
        job.refresh_from_db()
        if actor is not None and first:
            audit.record(actor, "job.cancel", job)
        get_backend(job.backend).cancel(job)
        return job
    raise ValidationError("The job changed state too often to cancel; try again.")


# --- preemption -------------------------------------------------------------------------

STOPPING = "; stopping"


def preempt_job(job: Job, reason: str) -> None:
    """Make room for another job. Nothing launched yet: back to the queue at once.
    Launched: SIGTERM (the executor creates GANTRY_PREEMPT_FILE first, so training code
    can checkpoint) and, when the workers have stopped, `requeue_preempted`. A preempted
    job never fails for it, keeps its submit order and priority, and reuses its working
    directory when it runs again."""
    for _ in range(3):
        if job.state == JobState.ADMITTED:
            if transition(
                job,
                JobState.QUEUED,
                f"{reason}; requeued (preemption {job.preemptions + 1})",
                placement={},
                preemptions=job.preemptions + 1,
            ):
                return
        elif job.state in states.LAUNCHED:
            grace = settings.GANTRY_JOB_GRACE_SECONDS
            first = Job.objects.filter(
                pk=job.pk,
                state=job.state,
                preempt_requested_at__isnull=True,
                cancel_requested_at__isnull=True,
            ).update(preempt_requested_at=timezone.now(), state_reason=f"{reason}{STOPPING}")
            if first:
                save = settings.GANTRY_PREEMPT_SAVE_SECONDS
                _note(job, f"{reason}: asking it to checkpoint ({save} s), then SIGTERM ({grace} s grace)")
                transaction.on_commit(partial(get_backend(job.backend).cancel, job))
            return
        else:
            return
        job.refresh_from_db()  # lost a race with launch: look again


def requeue_preempted(job: Job, detail: str = "") -> bool:
    """A preempted job's workers have stopped: back to the queue (not failed)."""
    reason = job.state_reason.removesuffix(STOPPING) or "preempted"
    n = job.preemptions + 1
    return transition(
        job,
        JobState.QUEUED,
        f"{reason}{f' ({detail})' if detail else ''}; requeued (preemption {n})",
        placement={},
        preempt_requested_at=None,
        preemptions=n,
    )


def end_attempt(job: Job, outcome: str, reason: str, actor=None) -> bool:
    """Finish the current attempt: retry (back to queued) if it failed or was lost and
    retries remain, otherwise move to `outcome`."""
    retryable = outcome in (JobState.FAILED, JobState.LOST) and not job.cancel_requested_at
    if retryable and job.attempt <= job.max_retries:
        word = "lost" if outcome == JobState.LOST else "failed"
        nxt = job.attempt + 1
        return transition(
            job,
            JobState.QUEUED,
            f"attempt {job.attempt} {word} ({reason}); retrying, {nxt} of {job.max_retries + 1}",
            actor=actor,
            attempt=nxt,
            token_hash="",
            placement={},
            cancel_requested_at=None,
        )
    return transition(job, outcome, reason, actor=actor)


def settle_job(job: Job) -> None:
    """Decide a launched job's state from its workers' outcomes."""
    job.refresh_from_db()
    if job.state not in states.LAUNCHED:
        return
    workers = list(job.worker_set.all())
    bad = [w for w in workers if w.state in WORKER_DONE and w.state != "succeeded"]
    if bad:
        w = bad[0]
        who = f"worker {w.rank} " if job.workers > 1 else ""
        backend = get_backend(job.backend)
        others = [x.rank for x in workers if x.state not in WORKER_DONE]
        if others:
            # One worker of a gang failing dooms the others (torchrun does the same).
            backend.cancel(job, ranks=others)
        if job.cancel_requested_at is not None:
            reason = job.state_reason.removesuffix("; stopping") or "cancelled"
            transition(job, JobState.CANCELLED, reason)
        elif job.preempt_requested_at is not None:
            if not others:  # the whole gang has stopped
                requeue_preempted(job)
        elif w.state == "timed_out":
            transition(job, JobState.TIMED_OUT, f"{who}{w.reason}")
        elif w.state == "cancelled":
            transition(job, JobState.CANCELLED, f"{who}{w.reason}")
        else:
            end_attempt(
                job, JobState.FAILED if w.state == "failed" else JobState.LOST, f"{who}{w.reason}"
            )
        return
    if workers and all(w.state == "succeeded" for w in workers):
        if job.workers > 1:
            reason = f"all {job.workers} workers exited with code 0"
        else:
            reason = workers[0].reason or "exited with code 0"
        transition(job, JobState.SUCCEEDED, reason)


# --- reconcile --------------------------------------------------------------------------


def _lose_worker(job: Job, rank: int, reason: str) -> None:
    JobWorker.objects.filter(job=job, rank=rank).exclude(state__in=WORKER_DONE).update(
        state="lost", reason=reason[:500]
    )


def reconcile_job(job: Job, now: datetime | None = None, *, adopting: bool = False) -> str | None:
    """Compare one launched job with its processes and the clock; returns what was done.

    The cases, in order: a preemption that is over (or overdue), a worker whose process
    is gone, silent or over its memory, a cancel that was not obeyed, a timeout the
    executor did not enforce, a CPU notebook left idle.
    """
    now = now or timezone.now()
    backend = get_backend(job.backend)
    probes = {p.rank: p for p in (backend.adopt(job) if adopting else backend.probe(job))}
    job.refresh_from_db()
    if job.state not in states.LAUNCHED:
        return None
    if job.preempt_requested_at and not job.cancel_requested_at:
        return _finish_preemption(job, backend, probes, now)
    return (
        _check_workers(job, backend, probes, now, adopting)
        or _enforce_cancel(job, backend, now)
        or _enforce_timeout(job, backend, now)
        or _stop_idle_notebook(job, now)
    )


def _finish_preemption(job: Job, backend, probes, now: datetime) -> str | None:
    """Requeue a preempted job once its processes are gone, or kill them when they
    overstay the grace period and the checkpoint save window (executor/checkpoints.py)."""
    alive = any(p.alive for p in probes.values())
    wait = settings.GANTRY_JOB_GRACE_SECONDS + settings.GANTRY_PREEMPT_SAVE_SECONDS + 30
    if not alive or (now - job.preempt_requested_at).total_seconds() > wait:
        backend.kill(job)
        requeue_preempted(job, "processes killed: they did not stop in time" if alive else "")
        return "preempted"
    return None


def _check_workers(job: Job, backend, probes, now: datetime, adopting: bool) -> str | None:
    """A worker whose executor vanished or stopped sending heartbeats is lost; one over its
    memory request is killed (the job fails)."""
    timeout = settings.GANTRY_HEARTBEAT_TIMEOUT_SECONDS
    who = (lambda w: f"worker {w.rank} ") if job.workers > 1 else (lambda w: "")
    for w in [w for w in job.worker_set.all() if w.state not in WORKER_DONE]:
        probe = probes.get(w.rank)
        if probe is not None and not probe.alive:
            reason = (
                f"{who(w)}executor was gone when the platform restarted ({probe.detail})"
                if adopting
                else f"{who(w)}{probe.detail or 'executor process vanished'}"
            )
            return _lose(job, backend, w.rank, reason)
        seen = w.last_heartbeat_at or w.launched_at
        if seen and (now - seen).total_seconds() > timeout:
            return _lose(job, backend, w.rank, f"{who(w)}no heartbeat for {int((now - seen).total_seconds())} s")
        if probe is not None and probe.rss_mb is not None and probe.rss_mb > job.memory_mb:
            reason = (
                f"{who(w)}exceeded its memory limit of {job.memory_mb} MiB "
                f"(resident {probe.rss_mb} MiB)"
            )
            _note(job, reason + ": killing it")
            backend.kill(job)
            JobWorker.objects.filter(job=job, rank=w.rank).update(state="failed", reason=reason)
            end_attempt(job, JobState.FAILED, reason)
            return "memory"
    return None


def _lose(job: Job, backend, rank: int, reason: str) -> str:
    backend.kill(job)
    _lose_worker(job, rank, reason)
    end_attempt(job, JobState.LOST, reason)
    return "lost"


def _enforce_cancel(job: Job, backend, now: datetime) -> str | None:
    """A cancel the processes did not obey within the grace period: kill them."""
    grace = settings.GANTRY_JOB_GRACE_SECONDS
    if job.cancel_requested_at and (now - job.cancel_requested_at).total_seconds() > grace + 30:
        backend.kill(job)
        transition(
            job, JobState.CANCELLED, "cancelled (processes killed: they did not stop in time)"
        )
        return "cancelled"
    return None


def _enforce_timeout(job: Job, backend, now: datetime) -> str | None:
    """The executor stops a job at its timeout; past the timeout and the grace period,
    the server does."""
    if not (job.timeout_seconds and job.started_at):
        return None
    limit = job.timeout_seconds + settings.GANTRY_JOB_GRACE_SECONDS + 30
    if (now - job.started_at).total_seconds() <= limit:
        return None
    backend.kill(job)
    transition(
        job, JobState.TIMED_OUT, f"timed out after {job.timeout_seconds} s (stopped by the server)"
    )
    return "timed_out"


def _stop_idle_notebook(job: Job, now: datetime) -> str | None:
    """Request traffic keeps only CPU notebooks alive: GPU jobs are judged by their GPUs'
    utilization (telemetry.services.check_idle, which falls back to traffic without NVML)."""
    if not (
        job.kind == JobKind.NOTEBOOK
        and job.gpus == 0
        and job.state == JobState.RUNNING
        and not job.cancel_requested_at
    ):
        return None
    idle = timedelta(minutes=settings.GANTRY_NOTEBOOK_IDLE_MINUTES)
    last = job.last_activity_at or job.started_at
    if last and now - last > idle:
        cancel_job(
            None,
            job,
            f"stopped after {settings.GANTRY_NOTEBOOK_IDLE_MINUTES} minutes without activity",
        )
        return "idle"
    return None
