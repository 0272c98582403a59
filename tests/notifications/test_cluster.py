"""One delivery end to end through the real background worker: a job's failure commits,
its receiver queues a task on the real broker, and `manage.py qcluster` (a separate
process) fans it out and posts the signed webhook."""

import os
import signal
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from jobs.services.submit import submit_job
from jobs.states import transition
from notifications import services
from notifications.delivery import SIGNATURE_HEADER, verify
from notifications.models import Delivery
from tests.jobs.conftest import wait_until
from tests.notifications.servers import Receiver

pytestmark = pytest.mark.slow


def _cluster_env(tmp_path) -> dict:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        database_url = f"sqlite:///{db['NAME']}?timeout=20"
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "GANTRY_DATA_DIR": str(tmp_path / "qdata"),
        "SECRET_KEY": settings.SECRET_KEY,  # django-q signs queued tasks with it
        "GANTRY_WORKERS": "1",
    }


def test_a_failure_is_delivered_by_the_real_cluster(transactional_db, owner, project, tmp_path):
    with Receiver() as receiver:
        _, secret = services.create_subscription(
            owner, project=project, name="ci", channel="webhook", url=receiver.url,
            events=["job.failed"],
        )
        job = submit_job(owner, project, name="digits", command="python train.py")
        for state in ("admitted", "starting", "running", "failed"):
            assert transition(job, state, "exit code 3" if state == "failed" else state)
        assert not receiver.received  # queued, not sent by whoever moved the job
        log_path = tmp_path / "qcluster.log"
        with open(log_path, "wb") as log:
            cluster = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=settings.BASE_DIR,
                env=_cluster_env(tmp_path),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                wait_until(
                    lambda: Delivery.objects.filter(state="delivered").exists(),
                    timeout=90,
                    what=f"the cluster to deliver: {log_path.read_text(errors='replace')[-2000:]}",
                )
            finally:
                os.killpg(cluster.pid, signal.SIGTERM)
                try:
                    cluster.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(cluster.pid, signal.SIGKILL)
                    cluster.wait()
    (headers, body), = receiver.received
    assert verify(secret, headers[SIGNATURE_HEADER], body)
    assert receiver.bodies()[0]["message"] == "exit code 3"
