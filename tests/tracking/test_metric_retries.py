"""A metric point is its key, value, timestamp and step, as in MLflow's store: the same
point sent again (a client retrying a request whose answer it lost) is stored once."""

import mlflow
import pytest
import requests
from mlflow.entities import Metric as MlflowMetric

from tracking.models import Metric, MetricRollup

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_retried_log_metric_leaves_one_point(mlflow_env, token_for, owner, project):
    token = token_for(owner, project)
    client = mlflow_env(token)
    run = client.create_run("0")
    first = {"run_id": run.info.run_id, "key": "loss", "value": 1.0, "timestamp": 1000, "step": 0}
    for _ in range(2):  # the first call, and the client's retry of it
        answer = requests.post(
            f"{mlflow.get_tracking_uri()}/api/2.0/mlflow/runs/log-metric",
            json=first,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert answer.status_code == 200
    for step in range(1, 100):
        client.log_metric(
            run.info.run_id, "loss", 1.0 / (step + 1), timestamp=1000 + step, step=step
        )
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == list(range(100))
    assert MetricRollup.objects.get(run__run_id=run.info.run_id, key="loss").count == 100


def test_a_batch_keeps_each_point_once_and_distinct_values_at_one_step(
    mlflow_env, token_for, owner, project
):
    client = mlflow_env(token_for(owner, project))
    run = client.create_run("0")
    same = MlflowMetric("acc", 0.5, 1000, 0)
    client.log_batch(run.info.run_id, metrics=[same, same, MlflowMetric("acc", 0.6, 1000, 0)])
    client.log_batch(run.info.run_id, metrics=[same])
    stored = Metric.objects.filter(run__run_id=run.info.run_id, key="acc")
    assert sorted(stored.values_list("value", flat=True)) == [0.5, 0.6]
