"""Jobs are runs, both ways: what a job reports with `executor.log_metric` (stored by the
agent API's ingestion, jobs.services.ingestion, as the executor's batches are) shows in
MLflow's view of the job's run, read by the real client from a live Gantry. The executor
process itself is not started here: tests/jobs cover executor -> ingestion, and
test_job_runs.py runs a real job that logs through MLflow."""

import mlflow
import pytest
import requests
from mlflow.exceptions import MlflowException

from jobs.services import ingestion
from tests.jobs.test_live import running_job
from tracking import jobenv

pytestmark = pytest.mark.django_db(transaction=True)


def report(job, points):
    """What the executor sends for executor.log_metric calls: numbered points of rank 0."""
    seq = job.metrics.count()
    ingestion.ingest_metrics(
        job,
        0,
        [
            {"seq": seq + i, "name": name, "step": step, "value": value, "ts": 1_700_000_000 + i}
            for i, (name, step, value) in enumerate(points, start=1)
        ],
    )


def test_executor_metrics_show_in_the_jobs_mlflow_run(
    mlflow_env, live_server, token_for, owner, outsider, project
):
    job = running_job(owner, project, name="resnet")
    run = jobenv.run_for_job(job)
    # Inside the job, MLflow calls use the job's tracking token and land in its run.
    client = mlflow_env(jobenv.job_token(job))
    client.log_metric(run.run_id, "loss", 0.5, step=3)
    report(
        job,
        [
            ("throughput", 1, 810.0),
            ("throughput", 2, 835.5),
            ("throughput", 3, 829.25),
            ("loss", 3, 0.5),  # the relay's copy of the MLflow call: counted once
            ("grad_norm", None, None),  # a non-finite value, no step
        ],
    )

    reader = mlflow_env(token_for(owner, project))
    fetched = reader.get_run(run.run_id)
    assert fetched.data.metrics["throughput"] == 829.25
    assert fetched.data.metrics["loss"] == 0.5
    assert set(fetched.data.metrics) == {"throughput", "loss", "grad_norm"}
    history = reader.get_metric_history(run.run_id, "throughput")
    assert [(m.step, m.value) for m in history] == [(1, 810.0), (2, 835.5), (3, 829.25)]
    assert history[0].timestamp == 1_700_000_001_000
    assert [(m.step, m.value) for m in reader.get_metric_history(run.run_id, "loss")] == [(3, 0.5)]
    found = reader.search_runs([str(run.experiment_id)], "attributes.run_name = 'resnet'")
    assert [r.info.run_id for r in found] == [run.run_id]
    assert found[0].data.metrics["throughput"] == 829.25

    auth = {"Authorization": f"Bearer {token_for(owner, project)}"}
    sampled = requests.get(
        f"{live_server.url}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
        params={"run_ids": run.run_id, "metric_key": "throughput", "max_results": 100},
        headers=auth,
        timeout=30,
    ).json()["metrics"]
    assert [(m["step"], m["value"]) for m in sampled] == [(1, 810.0), (2, 835.5), (3, 829.25)]

    outsider_client = mlflow_env(token_for(outsider))
    with pytest.raises(MlflowException) as exc:
        outsider_client.get_metric_history(run.run_id, "throughput")
    assert exc.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    mlflow.set_tracking_uri(None)


def test_a_long_executor_history_reads_as_an_envelope_keeping_spikes(
    mlflow_env, live_server, token_for, owner, project
):
    job = running_job(owner, project, name="long")
    run = jobenv.run_for_job(job)
    values = [1.0] * 400
    values[137] = 50.0  # a spike the chart must keep
    report(job, [("loss", step, value) for step, value in enumerate(values)])
    answer = requests.get(
        f"{live_server.url}/api/2.0/mlflow/metrics/get-history-bulk-interval",
        params={"run_ids": run.run_id, "metric_key": "loss", "max_results": 40},
        headers={"Authorization": f"Bearer {token_for(owner, project)}"},
        timeout=30,
    ).json()["metrics"]
    assert len(answer) <= 40
    assert (137, 50.0) in {(m["step"], m["value"]) for m in answer}
    assert max(m["step"] for m in answer) == 399
