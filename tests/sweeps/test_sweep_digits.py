"""The real thing: a sweep of the digits example on the local backend, run by a real
django-q cluster (`manage.py qcluster`: admission, launches and the sweep controller,
kicked by the trials' state changes and metrics), with real executors reporting to a live
server. The worker is killed mid-sweep and a new one goes on from the stored study."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from sweeps.models import Sweep, SweepState, TrialState
from sweeps.services import create_sweep
from tests.jobs.conftest import wait_until
from tests.jobs.test_examples import EXAMPLES, required_module

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sweep-digits")]


class Cluster:
    """`manage.py qcluster` against the test database, stopped by killing its group."""

    def __init__(self, tmp_path, name):
        self.log_path = tmp_path / f"{name}.log"
        db = connection.settings_dict
        if connection.vendor == "postgresql":
            database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        else:
            database_url = f"sqlite:///{db['NAME']}?timeout=20"
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "GANTRY_DATA_DIR": str(tmp_path / "qdata"),
            "SECRET_KEY": settings.SECRET_KEY,
            "GANTRY_URL": settings.GANTRY_URL,
            "GANTRY_JOBS_DIR": str(settings.GANTRY_JOBS_DIR),
            "GANTRY_LOCAL_CPUS": "2",
            "GANTRY_LOCAL_MEMORY_MB": "8192",
            "GANTRY_HEARTBEAT_SECONDS": "0.5",
            "GANTRY_JOB_GRACE_SECONDS": "3",
            "GANTRY_WORKERS": "2",
        }
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"], cwd=settings.BASE_DIR, env=env,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def kill(self):
        """As a crash would: no draining, no goodbye (the executors live on)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()

    def text(self):
        return self.log_path.read_text(errors="replace")[-3000:]


SWEEP = {
    "name": "digits lr",
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
    "template": {
        "command": f"python {EXAMPLES / 'train_digits.py'}",
        "parameters": {"epochs": 4, "batch-size": 32},
        "env": {"OMP_NUM_THREADS": "1"},  # two trials on two cores: no thread fight
        "cpus": 1,
        "memory_mb": 1024,
    },
    "parameters": {"lr": {"type": "loguniform", "low": 0.00001, "high": 0.03}},
    "sampler": "random",
    "seed": 3,
    "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 2},
    "budget": {"trials": 6, "wall_minutes": 10},
    "parallelism": 2,
}


def test_a_digits_sweep_prunes_survives_a_worker_restart_and_shows_the_best_trial(
    running_jobs, owner, project, tmp_path, client
):
    required_module("torch")
    required_module("sklearn")
    first = Cluster(tmp_path, "first")
    second = None
    try:
        sweep = create_sweep(owner, project, json.dumps(SWEEP))

        def ended(n):
            return lambda: sweep.trials.exclude(state=TrialState.RUNNING).count() >= n

        wait_until(ended(2), timeout=120, what=f"two trials to end; worker log: {first.text()}")
        first.kill()
        logs_at_kill = sweep.study_logs.count()
        time.sleep(1)  # the executors go on meanwhile; their metrics wait in the database
        second = Cluster(tmp_path, "second")

        def finished():
            sweep.refresh_from_db()
            return sweep.state != SweepState.RUNNING

        wait_until(finished, timeout=240, what=f"the sweep to finish; worker log: {second.text()}")

        def jobs_ended():  # a pruned trial ends at once; its job stops within the grace
            return all(t.job.is_terminal for t in sweep.trials.select_related("job"))

        wait_until(jobs_ended, timeout=60, what="the trials' jobs to end")
    finally:
        for cluster in (first, second):
            if cluster is not None and cluster.process.poll() is None:
                cluster.kill()

    trials = list(sweep.trials.select_related("job").order_by("number"))
    states = [(t.number, t.state, t.reason) for t in trials]
    assert sweep.state == SweepState.SUCCEEDED, (sweep.state_reason, states)
    assert "budget spent: 6 of 6 trials finished" in sweep.state_reason
    assert [t.number for t in trials] == list(range(6)), "no trial lost or asked twice across the restart"
    assert sweep.study_logs.count() > logs_at_kill, "the second worker went on with the same study"
    for trial in trials:
        assert trial.job.parameters == {"epochs": 4, "batch-size": 32, "lr": trial.params["lr"]}

    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, states
    for trial in pruned:
        assert trial.reason.startswith("pruned at step "), trial.reason
        assert "ASHA rung" in trial.reason
        # Stopped with the reason, unless (under load) the job had ended by itself first.
        assert trial.job.state in ("cancelled", "succeeded"), trial.job.state
        if trial.job.state == "cancelled":
            assert trial.job.state_reason.startswith("pruned at step"), trial.job.state_reason
        # Pruned at a step it had reported (under load the pruner may only get to a trial's
        # metrics after its last epoch).
        step = int(trial.reason.removeprefix("pruned at step ").split(":")[0])
        assert step <= trial.reported <= 4, trial.reason

    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.objective)
    assert best.objective > 0.8
    client.force_login(owner)
    page = client.get(sweep.get_absolute_url()).content.decode()
    best_panel = page.split('id="best-trial"')[1].split("</div></div>")[0]
    assert f"job <a href=\"/jobs/{best.job_id}/\">#{best.job_id}</a>" in best_panel
    assert f"trial {best.number}," in best_panel
    assert f"{best.objective:.4g}"[:4] in best_panel
    assert pruned[0].reason.split(":")[0] in page
    assert Sweep.objects.get(pk=sweep.pk).importance_trials >= 3 or len(complete) < 3
