"""What notifications hears from jobs (jobs.signals). A receiver only queues a task:
a state change is never held up by a slow or dead endpoint."""

from __future__ import annotations

import logging

from notifications.models import Event

logger = logging.getLogger(__name__)

TERMINAL_EVENTS = {
    "succeeded": Event.SUCCEEDED,
    "failed": Event.FAILED,
    "timed_out": Event.FAILED,
    "lost": Event.LOST,
}
ALERT_EVENTS = {
    "idle_warning": Event.IDLE_WARNING,
    "waiting_long": Event.WAITING_LONG,
    "quota_nearly_full": Event.QUOTA_NEARLY_FULL,
}


def event_of(from_state: str, to_state: str, reason: str) -> str | None:
    """The event a transition is, if anyone may want to hear of it. A preempted job goes
    back to the queue with "preemption" in its reason (jobs.services.lifecycle)."""
    if to_state in TERMINAL_EVENTS:
        return TERMINAL_EVENTS[to_state]
    if to_state == "queued" and from_state != "queued" and "preemption" in reason:
        return Event.PREEMPTED
    return None


def _queue(job, event: str, message: str) -> None:
    from django_q.tasks import async_task

    try:
        async_task(
            "notifications.tasks.notify",
            job.pk,
            event,
            message,
            task_name=f"notifications: {event} of job {job.pk}",
        )
    except Exception:  # the broker being down must not break whoever moved the job
        logger.warning("could not queue the %s notification of job %s", event, job.pk, exc_info=True)


def on_job_transitioned(sender, job, event, **kwargs) -> None:
    name = event_of(event.from_state, event.to_state, event.reason)
    if name is not None:
        _queue(job, name, event.reason)


def on_job_alert(sender, job, kind, message="", **kwargs) -> None:
    name = ALERT_EVENTS.get(kind)
    if name is not None:
        _queue(job, name, message)
