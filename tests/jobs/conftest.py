"""Fixtures for job tests that run real executors against a live server.

Nothing is mocked: `live_server` serves the executor endpoints, the local
backend starts real `python -m executor` processes, and the tests call the task
functions (admission, launch, reconcile) directly, polling the database until a
state is reached.
"""

import os
import signal
import time

import pytest

from jobs import tasks as job_tasks
from jobs.compute import get_backend, reset_backends
from jobs.compute.local import process_start_time
from jobs.models import Job, JobWorker
from scheduling import tasks

WAIT_SECONDS = 60


@pytest.fixture
def job_settings(settings, tmp_path):
    """Settings for fast, isolated jobs: small heartbeats, files beside tmp_path.

    Sandboxed jobs (the default where bubblewrap works) may read tmp_path, where tests
    write their scripts, but never Gantry's data: that goes to a sibling directory."""
    data = tmp_path.parent / f"{tmp_path.name}-data"
    settings.GANTRY_JOBS_DIR = data / "jobs"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": data / "files"},
        },
    }
    tmp_path.chmod(0o755)  # a job runs as a uid of its own
    settings.GANTRY_JOB_READ_ONLY_PATHS = [*settings.GANTRY_JOB_READ_ONLY_PATHS, str(tmp_path)]
    settings.GANTRY_LOCAL_CPUS = 4
    settings.GANTRY_LOCAL_MEMORY_MB = 8192
    settings.GANTRY_HEARTBEAT_SECONDS = 0.5
    settings.GANTRY_JOB_GRACE_SECONDS = 2
    settings.GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS = 20
    reset_backends()
    yield settings
    reset_backends()


@pytest.fixture
def running_jobs(job_settings, live_server):
    """A live server the executors talk to; every process is killed afterwards."""
    job_settings.GANTRY_URL = live_server.url
    yield live_server
    backend = get_backend()
    for job in Job.objects.all():
        backend.kill(job)
    for worker in JobWorker.objects.exclude(pid=None):
        if process_start_time(worker.pid) == worker.pid_start_time:
            os.kill(worker.pid, signal.SIGKILL)


def wait_for(job, *states, timeout=WAIT_SECONDS, reconcile=False, step=None):
    """Run admission (and reconcile) until the job reaches one of `states`."""
    deadline = time.monotonic() + timeout
    while True:
        tasks.admit_and_launch()
        if reconcile:
            job_tasks.reconcile()
        job.refresh_from_db()
        if job.state in states:
            return job
        if step is not None:
            step(job)
        if time.monotonic() > deadline:
            events = list(job.events.values_list("to_state", "reason"))
            raise AssertionError(
                f"job {job.pk} is {job.state} ({job.state_reason}), not {states}; events {events}"
            )
        time.sleep(0.2)


def wait_until(predicate, timeout=WAIT_SECONDS, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
