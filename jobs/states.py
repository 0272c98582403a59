"""The job state machine: states, the allowed transitions, and the one function that moves a job.

    queued -> admitted -> starting -> running -> succeeded | failed | cancelled | timed_out | lost
    admitted / starting / running -> queued   (requeue, or a retry after a failed or lost attempt)
    any non-terminal state -> cancelled

`transition()` is the only writer of `Job.state`: it updates the row only if the
state is still the one the caller read (`filter(pk=…, state=current).update(…)`),
so two concurrent transitions cannot both win, and it records a JobEvent.
"""

from __future__ import annotations

from django.db import models, transaction
from django.utils import timezone


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    ADMITTED = "admitted", "Admitted"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"
    LOST = "lost", "Lost"


QUEUED = JobState.QUEUED
ADMITTED = JobState.ADMITTED
STARTING = JobState.STARTING
RUNNING = JobState.RUNNING
SUCCEEDED = JobState.SUCCEEDED
FAILED = JobState.FAILED
CANCELLED = JobState.CANCELLED
TIMED_OUT = JobState.TIMED_OUT
LOST = JobState.LOST

TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, TIMED_OUT, LOST})
# States that hold capacity on a backend.
ACTIVE = frozenset({ADMITTED, STARTING, RUNNING})
# States whose processes may exist.
LAUNCHED = frozenset({STARTING, RUNNING})

ALLOWED: dict[str, frozenset[str]] = {
    QUEUED: frozenset({ADMITTED, CANCELLED}),
    ADMITTED: frozenset({STARTING, QUEUED, CANCELLED, FAILED}),
    STARTING: frozenset({RUNNING, QUEUED, SUCCEEDED, FAILED, CANCELLED, TIMED_OUT, LOST}),
    RUNNING: frozenset({QUEUED, SUCCEEDED, FAILED, CANCELLED, TIMED_OUT, LOST}),
}

# The timestamp each destination state sets.
TIMESTAMPS = {
    QUEUED: "queued_at",
    ADMITTED: "admitted_at",
    RUNNING: "started_at",
    **{state: "finished_at" for state in TERMINAL},
}

BADGES = {
    QUEUED: "text-bg-secondary",
    ADMITTED: "text-bg-info",
    STARTING: "text-bg-info",
    RUNNING: "text-bg-primary",
    SUCCEEDED: "text-bg-success",
    FAILED: "text-bg-danger",
    CANCELLED: "text-bg-warning",
    TIMED_OUT: "text-bg-danger",
    LOST: "text-bg-dark",
}


def can_transition(from_state: str, to_state: str) -> bool:
    return to_state in ALLOWED.get(from_state, frozenset())


def transition(job, to_state: str, reason: str, actor=None, **fields) -> bool:
    """Move `job` from the state it was read in to `to_state`; True if this call won.

    Writes the new state, `state_reason`, the matching timestamp and any extra
    `fields` in one conditional UPDATE, and a JobEvent for the timeline. On
    success the in-memory `job` is updated too; on a lost race it is left as is
    (callers re-read it if they care).
    """
    from jobs.models import Job, JobEvent, JobScheduling

    if to_state not in JobState.values:
        raise ValueError(f"unknown job state {to_state!r}")
    current = job.state
    if not can_transition(current, to_state):
        return False
    now = timezone.now()
    values = {"state": to_state, "state_reason": reason[:500], **fields}
    stamp = TIMESTAMPS.get(to_state)
    if stamp:
        values[stamp] = now
    with transaction.atomic():
        won = Job.objects.filter(pk=job.pk, state=current).update(**values)
        if not won:
            return False
        event = JobEvent.objects.create(
            job_id=job.pk,
            at=now,
            from_state=current,
            to_state=to_state,
            reason=reason[:500],
            actor=actor if getattr(actor, "pk", None) else None,
        )
        if current == QUEUED:
            # Out of the queue: no place in it, no start to estimate.
            JobScheduling.objects.filter(job_id=job.pk).delete()
            job._state.fields_cache.pop("scheduling", None)
    for name, value in values.items():
        setattr(job, name, value)
    # Job pages and lists watching this job hear of it (jobs/consumers.py).
    from jobs.consumers import publish_status

    transaction.on_commit(lambda: publish_status(job, event))
    from jobs.signals import job_transitioned

    transaction.on_commit(lambda: job_transitioned.send(sender=None, job=job, event=event))
    if to_state in TERMINAL or to_state == QUEUED:
        # Capacity was freed or a job is waiting: run admission soon, not at the next tick.
        from jobs.tasks import kick

        transaction.on_commit(kick)
    return True
