"""Fixtures for fault tests: jobs settings, a killable web server, and cleanup of executors."""

import os
import signal

import pytest

from jobs.compute import get_backend
from jobs.compute.local import process_start_time
from jobs.models import Job, JobWorker
from tests.faults.procs import Uvicorn
from tests.jobs.conftest import job_settings  # noqa: F401 - a fixture used here


def _kill_executors():
    backend = get_backend()
    for job in Job.objects.all():
        backend.kill(job)
    for worker in JobWorker.objects.exclude(pid=None):
        if process_start_time(worker.pid) == worker.pid_start_time:
            os.kill(worker.pid, signal.SIGKILL)


@pytest.fixture
def web(job_settings, transactional_db, tmp_path):  # noqa: F811
    """A real uvicorn over the test database that executors report to; the test may stop
    and restart it. Every executor is killed afterwards."""
    # Fault tests coordinate with their jobs through files in tmp_path, which a sandboxed
    # job may not write: they run unsandboxed (tests/jobs/test_isolation.py covers that).
    job_settings.GANTRY_SANDBOX = "off"
    job_settings.GANTRY_ALLOW_UNISOLATED_JOBS = True
    server = Uvicorn(tmp_path)
    server.start()
    job_settings.GANTRY_URL = server.url
    try:
        yield server
    finally:
        from django.db import connection

        connection.close()  # a test may have restarted the database under it
        _kill_executors()
        server.stop()
