"""Jobs are runs: an MLflow-only script, run as a real Gantry job (local backend, in its
sandbox where this machine has one), logs into its job's run through the executor's
relay, and its metrics are the job's metrics (the job page's charts)."""

import pytest

from jobs.compute import sandbox
from jobs.models import MetricPoint
from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.jobs.conftest import wait_for
from tests.jobs.test_examples import EXAMPLES
from tracking.models import LatestMetric, Metric, Param, Run

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_mlflow_example_logs_into_its_jobs_run_and_the_jobs_metrics(running_jobs, owner, project):
    job = submit_job(
        owner,
        project,
        name="mlflow digits",
        command=f"python {EXAMPLES / 'mlflow_digits.py'}",
        parameters={"epochs": 3},
    )
    wait_for(job, "succeeded", "failed", timeout=180)
    text = "\n".join(line["text"] for line in log_lines(job, worker=0, limit=10_000))
    assert job.state == "succeeded", (job.state_reason, text[-2000:])
    if sandbox.sandbox_status().available:  # the command had loopback only: the relay carried it
        assert "sandboxed as uid" in text
    run = Run.objects.get(job=job)
    assert run.experiment.project == project and run.experiment.is_default
    assert f"run {run.run_id} in experiment {run.experiment_id}" in text
    assert run.status == "FINISHED"
    assert dict(Param.objects.filter(run=run).values_list("key", "value"))["epochs"] == "3"
    assert list(
        Metric.objects.filter(run=run, key="loss").values_list("step", flat=True).order_by("step")
    ) == [0, 1, 2]
    assert 0.5 < LatestMetric.objects.get(run=run, key="accuracy").value <= 1.0
    # The same points are the job's metrics, numbered by the executor.
    points = MetricPoint.objects.filter(job=job, name="loss").order_by("step")
    assert list(points.values_list("step", flat=True)) == [0, 1, 2]
    assert [p.value for p in points] == pytest.approx(
        list(
            Metric.objects.filter(run=run, key="loss")
            .order_by("step")
            .values_list("value", flat=True)
        )
    )
    assert len(set(MetricPoint.objects.filter(job=job).values_list("seq", flat=True))) == 6
