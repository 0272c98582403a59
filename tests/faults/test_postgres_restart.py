"""PostgreSQL restarted while a job runs: the web server and the executor carry on.

Only in the PostgreSQL pass (CI runs the suite on both databases; on SQLite it is
deselected, not skipped): the test restarts
the local cluster with `pg_ctlcluster`. The web server reconnects on its own
(CONN_HEALTH_CHECKS); the executor retries the 5xx answers it gets meanwhile; the job
succeeds with its whole log.
"""

import os
import subprocess

import pytest
from django.db import connection

from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.faults.procs import script
from tests.jobs.conftest import wait_for, wait_until

# Collected only in the PostgreSQL pass (tests/conftest.py deselects it on SQLite).
pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LINES = 80


@pytest.fixture
def postgres(db):
    """The `pg_ctlcluster` command line that restarts the cluster under the test database."""
    assert connection.vendor == "postgresql", "marked postgres: runs only on PostgreSQL"
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions:
        pytest.fail("the suite runs on PostgreSQL, but no local cluster is in /etc/postgresql")
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"]


def test_postgres_restart_mid_job(postgres, web, owner, project, tmp_path):
    command = script(
        tmp_path,
        "count.py",
        f"""
        import time
        for i in range(1, {LINES} + 1):
            print(f"line {{i}}", flush=True)
            time.sleep(0.05)
        """,
    )
    job = submit_job(owner, project, name="pg", command=f"python {command}")
    wait_for(job, "running")

    def printed():
        return [ln["text"] for ln in log_lines(job, limit=100_000) if ln["stream"] == "stdout"]

    wait_until(lambda: len(printed()) >= 10, what="the first lines")

    connection.close()  # the test's own connection would die with the server
    restart = subprocess.run(postgres, capture_output=True, text=True, timeout=120)
    assert restart.returncode == 0, restart.stderr
    connection.ensure_connection()

    wait_for(job, "succeeded", "failed", "lost")
    assert job.state == "succeeded", (job.state_reason, web.log_text())
    assert printed() == [f"line {i}" for i in range(1, LINES + 1)]
    seqs = [ln["seq"] for ln in log_lines(job, limit=100_000)]
    assert seqs == sorted(set(seqs))
    # Served throughout by the same web server process: it reconnected by itself.
    assert web.starts == 1 and web.proc.poll() is None
