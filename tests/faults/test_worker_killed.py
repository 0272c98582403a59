"""The background worker (`manage.py qcluster`) killed with SIGKILL while it dispatches jobs.

Every job must end succeeded: launched once, or found lost by the next worker and retried
(its retries allow it). A command appends a line per run to a file, so the test counts how
often each job's command really started.
"""

import time

import pytest

from jobs.models import Job
from jobs.services.submit import submit_job
from jobs.states import TERMINAL
from tests.faults.procs import QCluster, script
from tests.jobs.conftest import wait_until

pytestmark = pytest.mark.slow

JOBS = 3


def test_sigkilled_worker_loses_no_job_and_runs_none_twice(web, owner, project, tmp_path):
    runs = tmp_path / "runs.txt"
    command = script(
        tmp_path,
        "count_run.py",
        f"""
        import os, time
        with open({str(runs)!r}, "a") as fh:
            fh.write(os.environ["GANTRY_JOB_ID"] + "\\n")
        time.sleep(1)
        print("done")
        """,
    )
    cluster = QCluster(tmp_path, web.url)
    cluster.start()
    try:
        jobs = [
            submit_job(
                owner, project, name=f"f{i}", command=f"python {command}", max_retries=2
            )
            for i in range(JOBS)
        ]
        ids = [job.pk for job in jobs]

        def dispatching():
            return Job.objects.filter(pk__in=ids, state__in=("admitted", "starting")).exists()

        wait_until(dispatching, timeout=90, what="the worker to pick the jobs up")
        cluster.kill()
        picked = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
        time.sleep(0.5)  # whatever the dead worker had in flight stays half done

        cluster.start()

        def all_finished():
            return not Job.objects.filter(pk__in=ids).exclude(state__in=TERMINAL).exists()

        wait_until(all_finished, timeout=100, what=f"every job to finish (at the kill: {picked})")
    finally:
        cluster.stop()

    started = runs.read_text().split() if runs.exists() else []
    for job in Job.objects.filter(pk__in=ids):
        events = list(job.events.values_list("from_state", "to_state", "reason"))
        context = (picked, events, cluster.log_text())
        assert job.state == "succeeded", context
        count = started.count(str(job.pk))
        # At least the run that succeeded; at most one run per attempt.
        assert 1 <= count <= job.attempt, context
        retries = [e for e in events if e[1] == "queued" and e[0] != ""]
        assert len(retries) == job.attempt - 1, context
        for _, _, reason in retries:
            assert reason.startswith("attempt ") and "retrying" in reason, context
