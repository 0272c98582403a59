"""The services' rule for an executor's "cancelled" outcome: a user's (or Gantry's)
cancel only if Gantry asked for it; otherwise whatever sent the SIGTERM (a node drain,
an eviction, a host shutdown) lost the attempt, which is retried while retries remain."""

import pytest
from django.utils import timezone

from jobs.models import Job, JobWorker
from jobs.services.ingestion import record_worker_status


@pytest.fixture
def running_job(owner, project):
    def make(backend="kubernetes", max_retries=1, **fields):
        job = Job.objects.create(
            project=project,
            created_by=owner,
            backend=backend,
            state="running",
            command="python x.py",
            max_retries=max_retries,
            **fields,
        )
        JobWorker.objects.create(job=job, rank=0, state="running")
        return job

    return make


def report_cancelled(job):
    record_worker_status(
        job,
        0,
        {
            "event": "exited",
            "outcome": "cancelled",
            "exit_code": 143,
            "reason": "cancelled: executor received SIGTERM",
        },
    )
    job.refresh_from_db()
    return job


def test_cancelled_without_a_request_is_lost_and_retried(running_job):
    job = report_cancelled(running_job())
    assert (job.state, job.attempt) == ("queued", 2)
    assert job.state_reason == (
        "attempt 1 lost (stopped by the cluster (executor received SIGTERM)); retrying, 2 of 2"
    )


def test_cancelled_without_a_request_and_no_retries_left_is_lost(running_job):
    job = report_cancelled(running_job(backend="local", max_retries=0))
    assert (job.state, job.state_reason) == (
        "lost",
        "stopped by something outside Gantry (executor received SIGTERM)",
    )
    assert JobWorker.objects.get(job=job).state == "lost"


def test_cancelled_after_a_cancel_request_is_a_cancel(running_job):
    job = running_job(cancel_requested_at=timezone.now(), state_reason="cancelled by ann; stopping")
    job = report_cancelled(job)
    assert (job.state, job.state_reason, job.attempt) == ("cancelled", "cancelled by ann", 1)


def test_cancelled_after_a_preemption_request_is_requeued_as_preempted(running_job):
    job = running_job(
        preempt_requested_at=timezone.now(), state_reason="preempted for job #9; stopping"
    )
    job = report_cancelled(job)
    assert job.state == "queued" and job.preemptions == 1 and job.attempt == 1
    assert JobWorker.objects.get(job=job).state == "cancelled"
