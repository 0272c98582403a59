"""The executor's two faults: the platform unreachable for a while, and the executor killed.

A job prints numbered lines through a real uvicorn the test stops and starts again; the
executor spools and retries, the server de-duplicates on (worker, seq). Whatever happens,
the stored log has every line once, in order.
"""

import os
import signal

import pytest

from jobs.models import JobWorker
from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.faults.procs import script
from tests.jobs.conftest import wait_for, wait_until

pytestmark = pytest.mark.slow

LINES = 80


def stdout(job):
    return [ln["text"] for ln in log_lines(job, limit=100_000) if ln["stream"] == "stdout"]


def counter(tmp_path, marker=None):
    """A command printing `line 1`…`line N`; with `marker`, the first attempt hangs after 20."""
    return script(
        tmp_path,
        "count.py",
        f"""
        import os, sys, time
        marker = {str(marker) if marker else None!r}
        first = marker is not None and not os.path.exists(marker)
        attempt = 1 if first or marker is None else 2
        for i in range(1, {LINES} + 1):
            print(f"attempt {{attempt}} line {{i}}", flush=True)
            if first and i == 20:
                open(marker, "w").close()
                time.sleep(300)
            time.sleep(0.05)
        """,
    )


def test_platform_unreachable_mid_job_loses_and_repeats_no_line(web, owner, project, tmp_path):
    job = submit_job(owner, project, name="n", command=f"python {counter(tmp_path)}")
    wait_for(job, "running")
    wait_until(lambda: len(stdout(job)) >= 10, what="the first lines")

    web.restart(down_seconds=3)  # the executor's posts fail meanwhile; it keeps spooling

    wait_for(job, "succeeded", "failed", "lost")
    assert job.state == "succeeded", (job.state_reason, web.log_text())
    assert stdout(job) == [f"attempt 1 line {i}" for i in range(1, LINES + 1)]
    seqs = [ln["seq"] for ln in log_lines(job, limit=100_000)]
    assert seqs == sorted(set(seqs))


def test_killed_executor_is_lost_retried_and_repeats_no_line(
    web, owner, project, tmp_path, settings
):
    settings.GANTRY_HEARTBEAT_TIMEOUT_SECONDS = 5
    marker = tmp_path / "first-attempt"
    job = submit_job(
        owner, project, name="k", command=f"python {counter(tmp_path, marker)}", max_retries=1
    )
    wait_for(job, "running")
    wait_until(lambda: len(stdout(job)) >= 20, what="the first attempt's lines")
    worker = JobWorker.objects.get(job=job)
    os.kill(worker.pid, signal.SIGKILL)

    wait_for(job, "succeeded", "failed", "lost", reconcile=True)
    assert job.state == "succeeded", job.state_reason
    assert job.attempt == 2
    lost = job.events.get(from_state="running", to_state="queued")
    assert lost.reason.startswith("attempt 1 lost (") and "retrying, 2 of 2" in lost.reason
    lines = stdout(job)
    first = [ln for ln in lines if ln.startswith("attempt 1 ")]
    second = [ln for ln in lines if ln.startswith("attempt 2 ")]
    assert first == [f"attempt 1 line {i}" for i in range(1, 21)]
    assert second == [f"attempt 2 line {i}" for i in range(1, LINES + 1)]
    assert lines == first + second
    seqs = [ln["seq"] for ln in log_lines(job, limit=100_000)]
    assert seqs == sorted(set(seqs))  # the second attempt continued the seq, never reused it
