"""The real background worker: `manage.py qcluster` runs the schedules and the kicks."""

import os
import signal
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from jobs.services.submit import submit_job
from jobs.tasks import SCHEDULES
from tests.jobs.conftest import wait_until

pytestmark = pytest.mark.slow


def test_qcluster_admits_launches_and_finishes_a_job(running_jobs, owner, project, tmp_path):
    from django_q.models import Schedule

    # post_migrate registered the schedules by code.
    assert set(Schedule.objects.values_list("name", flat=True)) >= set(SCHEDULES)

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        database_url = f"sqlite:///{db['NAME']}?timeout=20"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "GANTRY_DATA_DIR": str(tmp_path / "qdata"),
        "SECRET_KEY": settings.SECRET_KEY,  # django-q signs queued tasks with it
        "GANTRY_URL": settings.GANTRY_URL,
        "GANTRY_JOBS_DIR": str(settings.GANTRY_JOBS_DIR),
        "GANTRY_LOCAL_CPUS": "4",
        "GANTRY_LOCAL_MEMORY_MB": "8192",
        "GANTRY_HEARTBEAT_SECONDS": "0.5",
        "GANTRY_WORKERS": "1",
    }
    log = open(tmp_path / "qcluster.log", "wb")  # noqa: SIM115 - closed below

    def log_text():
        return (tmp_path / "qcluster.log").read_text(errors="replace")[-3000:]

    cluster = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # Submitting kicks an admission pass onto the queue; the cluster runs it.
        job = submit_job(owner, project, name="q", command="python -c 'print(42)'")

        def finished():
            job.refresh_from_db()
            return job.state in ("succeeded", "failed", "lost")

        wait_until(finished, timeout=90, what="the cluster to run the job")
        assert job.state == "succeeded", (job.state_reason, log_text())
    finally:
        os.killpg(cluster.pid, signal.SIGTERM)
        try:
            cluster.wait(5)  # it drains its queue politely; no need to wait for that
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.wait()
        log.close()
