"""The MLflow client's tracking calls against a live Gantry, asserted on what Gantry stored."""

import mlflow
import pytest
import requests
from mlflow.exceptions import MlflowException, RestException

from tracking.models import Experiment, LatestMetric, Metric, Param, Run, RunTag

pytestmark = pytest.mark.django_db(transaction=True)


def test_fluent_run_logs_params_metrics_and_tags_into_the_projects_experiment(
    mlflow_env, token_for, owner, project
):
    mlflow_env(token_for(owner, project))
    with mlflow.start_run(run_name="baseline") as active:
        mlflow.log_param("lr", 0.01)
        mlflow.log_params({"epochs": 3, "optimizer": "adam"})
        for step in range(3):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        mlflow.set_tag("team", "vision")
        mlflow.log_metrics({"acc": 0.5, "f1": float("nan")}, step=2)
    run = Run.objects.get(run_id=active.info.run_id)
    assert run.experiment.project == project and run.experiment.is_default
    assert run.name == "baseline" and run.status == "FINISHED" and run.end_time
    assert run.user_id == owner.username
    assert dict(Param.objects.filter(run=run).values_list("key", "value")) == {
        "lr": "0.01",
        "epochs": "3",
        "optimizer": "adam",
    }
    assert list(
        Metric.objects.filter(run=run, key="loss").order_by("step").values_list("step", "value")
    ) == [(0, 1.0), (1, 0.5), (2, 1.0 / 3)]
    assert LatestMetric.objects.get(run=run, key="loss").step == 2
    assert LatestMetric.objects.get(run=run, key="f1").is_nan
    assert RunTag.objects.get(run=run, key="team").value == "vision"

    fetched = mlflow.get_run(active.info.run_id)
    assert fetched.data.params["optimizer"] == "adam"
    assert fetched.data.metrics["loss"] == pytest.approx(1.0 / 3)
    assert fetched.data.tags["mlflow.runName"] == "baseline"
    history = mlflow.MlflowClient().get_metric_history(active.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]


def test_experiments_by_name_create_rename_delete_restore(mlflow_env, token_for, owner, project):
    client = mlflow_env(token_for(owner, project))
    experiment = mlflow.set_experiment("digits")
    assert experiment.name == "digits"  # bare for a token limited to the project
    assert Experiment.objects.get(pk=int(experiment.experiment_id)).project == project
    assert (
        mlflow.set_experiment("digits").experiment_id == experiment.experiment_id
    )  # found, not made
    assert (
        client.get_experiment_by_name("lab-a/vision/digits").experiment_id
        == experiment.experiment_id
    )
    with pytest.raises(RestException) as exc:
        client.create_experiment("digits")
    assert exc.value.error_code == "RESOURCE_ALREADY_EXISTS"
    client.rename_experiment(experiment.experiment_id, "digits-v2")
    assert client.get_experiment(experiment.experiment_id).name == "digits-v2"
    client.set_experiment_tag(experiment.experiment_id, "owner", "olivia")
    client.delete_experiment(experiment.experiment_id)
    assert Experiment.objects.get(pk=int(experiment.experiment_id)).lifecycle_stage == "deleted"
    names = [e.name for e in client.search_experiments()]
    assert "digits-v2" not in names
    client.restore_experiment(experiment.experiment_id)
    found = client.search_experiments(filter_string="name LIKE '%digits%'")
    assert [e.experiment_id for e in found] == [experiment.experiment_id]
    assert found[0].tags == {"owner": "olivia"}
    # A token for all of the owner's projects sees the name with its project.
    everywhere = mlflow_env(token_for(owner))
    assert everywhere.get_experiment(experiment.experiment_id).name == "lab-a/vision/digits-v2"


def test_log_batch_at_the_clients_limits_and_past_them(mlflow_env, token_for, owner, project):
    from mlflow.entities import Metric as MlflowMetric
    from mlflow.entities import Param as MlflowParam
    from mlflow.entities import RunTag as MlflowTag

    token = token_for(owner, project)
    client = mlflow_env(token)
    run = client.create_run("0")
    metrics = [MlflowMetric("m", float(i), 1000 + i, i) for i in range(1000)]
    params = [MlflowParam(f"p{i}", str(i)) for i in range(100)]
    client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=[MlflowTag("t", "v")])
    stored = Run.objects.get(run_id=run.info.run_id)
    assert Metric.objects.filter(run=stored).count() == 1000
    assert Param.objects.filter(run=stored).count() == 100
    assert LatestMetric.objects.get(run=stored, key="m").value == 999.0
    # The client splits batches itself; the server refuses one over the limit, and nothing of it is kept.
    response = requests.post(
        f"{mlflow.get_tracking_uri()}/api/2.0/mlflow/runs/log-batch",
        json={
            "run_id": run.info.run_id,
            "metrics": [{"key": "x", "value": 1, "timestamp": 1, "step": 0}] * 1001,
        },
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert not Metric.objects.filter(run=stored, key="x").exists()


def test_changing_a_param_is_refused(mlflow_env, token_for, owner, project):
    client = mlflow_env(token_for(owner, project))
    run = client.create_run("0")
    client.log_param(run.info.run_id, "lr", "0.1")
    client.log_param(run.info.run_id, "lr", "0.1")  # the same value again is fine
    with pytest.raises(MlflowException) as exc:
        client.log_param(run.info.run_id, "lr", "0.2")
    assert exc.value.error_code == "INVALID_PARAMETER_VALUE"
    assert Param.objects.get(run__run_id=run.info.run_id, key="lr").value == "0.1"


def test_search_runs_with_mlflows_filter_grammar(mlflow_env, token_for, owner, project):
    client = mlflow_env(token_for(owner, project))
    experiment_id = client.create_experiment("sweep")
    ids = {}
    for lr, acc, status in (
        (0.1, 0.7, "FINISHED"),
        (0.01, 0.9, "FINISHED"),
        (0.001, 0.8, "FAILED"),
    ):
        run = client.create_run(
            experiment_id, run_name=f"lr-{lr}", tags={"family": "cnn" if lr > 0.005 else "mlp"}
        )
        client.log_param(run.info.run_id, "lr", str(lr))
        client.log_metric(run.info.run_id, "acc", acc)
        client.set_terminated(run.info.run_id, status)
        ids[lr] = run.info.run_id

    def found(filter_string, **kw):
        return [r.info.run_id for r in client.search_runs([experiment_id], filter_string, **kw)]

    assert found("metrics.acc > 0.75", order_by=["metrics.acc DESC"]) == [ids[0.01], ids[0.001]]
    assert found("params.lr = '0.1'") == [ids[0.1]]
    assert set(found("tags.family = 'cnn' and attributes.status = 'FINISHED'")) == {
        ids[0.1],
        ids[0.01],
    }
    assert found("attributes.run_name LIKE 'lr-0.00%'") == [ids[0.001]]
    assert found("tags.`family` ILIKE 'MLP'") == [ids[0.001]]
    assert set(found("attributes.status IN ('FAILED', 'KILLED')")) == {ids[0.001]}
    assert found("metrics.acc >= 0.9 and params.lr != '0.1'") == [ids[0.01]]
    assert found("", order_by=["params.lr ASC"]) == [ids[0.001], ids[0.01], ids[0.1]]
    page = client.search_runs([experiment_id], max_results=2, order_by=["metrics.acc ASC"])
    assert [r.info.run_id for r in page] == [ids[0.1], ids[0.001]] and page.token
    rest = client.search_runs(
        [experiment_id], max_results=2, order_by=["metrics.acc ASC"], page_token=page.token
    )
    assert [r.info.run_id for r in rest] == [ids[0.01]] and not rest.token
    with pytest.raises(MlflowException) as exc:
        client.search_runs([experiment_id], "metrics.acc >> 1")
    assert exc.value.error_code == "INVALID_PARAMETER_VALUE"
    client.delete_run(ids[0.1])
    assert ids[0.1] not in found("")
    assert found("", run_view_type=mlflow.entities.ViewType.DELETED_ONLY) == [ids[0.1]]


def test_outsider_gets_resource_does_not_exist(
    mlflow_env, token_for, owner, outsider, project, other_project
):
    client = mlflow_env(token_for(owner, project))
    run = client.create_run("0")
    experiment_id = run.info.experiment_id
    client = mlflow_env(token_for(outsider))
    for call in (
        lambda: client.get_run(run.info.run_id),
        lambda: client.log_metric(run.info.run_id, "loss", 1.0),
        lambda: client.get_experiment(experiment_id),
        lambda: client.search_runs([experiment_id]),
        lambda: client.get_metric_history(run.info.run_id, "loss"),
    ):
        with pytest.raises(MlflowException) as exc:
            call()
        assert exc.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    assert client.get_experiment_by_name("lab-a/vision/Default") is None
    assert not Metric.objects.exists()
    # The outsider's own "0" is their own project's default experiment.
    assert (
        Run.objects.get(run_id=client.create_run("0").info.run_id).experiment.project
        == other_project
    )


def test_viewer_reads_but_cannot_log_and_read_tokens_cannot_write(
    mlflow_env, token_for, owner, member, project
):
    client = mlflow_env(token_for(owner, project))
    run = client.create_run("0")
    viewer = mlflow_env(token_for(member, project))  # a tenant member views tenant-visible projects
    assert viewer.get_run(run.info.run_id).info.run_id == run.info.run_id
    with pytest.raises(MlflowException) as exc:
        viewer.log_metric(run.info.run_id, "loss", 1.0)
    assert exc.value.error_code == "PERMISSION_DENIED"
    read_only = mlflow_env(token_for(owner, project, scope="read"))
    with pytest.raises(MlflowException) as exc:
        read_only.set_tag(run.info.run_id, "k", "v")
    assert exc.value.error_code == "PERMISSION_DENIED"
    assert not Metric.objects.exists() and not RunTag.objects.filter(key="k").exists()


def test_no_token_and_a_bad_token_are_unauthenticated(live_server):
    url = f"{live_server.url}/api/2.0/mlflow/experiments/search"
    anonymous = requests.post(url, json={}, timeout=30)
    assert anonymous.status_code == 401 and anonymous.json()["error_code"] == "UNAUTHENTICATED"
    bad = requests.post(url, json={}, headers={"Authorization": "Bearer gty_nope"}, timeout=30)
    assert bad.status_code == 401 and bad.json()["error_code"] == "UNAUTHENTICATED"


def test_long_histories_read_downsampled_keeping_spikes(
    mlflow_env, live_server, token_for, owner, project
):
    from mlflow.entities import Metric as MlflowMetric

    token = token_for(owner, project)
    client = mlflow_env(token)
    run = client.create_run("0")
    values = [1.0 + (step % 7) / 100 for step in range(5000)]
    values[1234] = 50.0  # a spike
    values[4321] = -3.0  # a dip
    for start in range(0, 5000, 1000):
        client.log_batch(
            run.info.run_id,
            metrics=[
                MlflowMetric("loss", values[s], 1000 + s, s) for s in range(start, start + 1000)
            ],
        )
    url = f"{live_server.url}/api/2.0/mlflow/metrics/get-history-bulk-interval"
    auth = {"Authorization": f"Bearer {token}"}
    params = {"run_ids": run.info.run_id, "metric_key": "loss", "max_results": 100}
    points = requests.get(url, params=params, headers=auth, timeout=30).json()["metrics"]
    assert 2 < len(points) <= 100
    steps = [p["step"] for p in points]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 4999
    assert max(p["value"] for p in points) == 50.0 and min(p["value"] for p in points) == -3.0
    assert {p["run_id"] for p in points} == {run.info.run_id}
    window = requests.get(
        url, params={**params, "start_step": 10, "end_step": 59}, headers=auth, timeout=30
    )
    assert [p["step"] for p in window.json()["metrics"]] == list(range(10, 60))  # short: whole
    # Few buckets over many blocks: read from the rollups, the extremes at their own steps.
    coarse = requests.get(url, params={**params, "max_results": 10}, headers=auth, timeout=30)
    coarse = coarse.json()["metrics"]
    assert 2 < len(coarse) <= 10
    assert (1234, 50.0) in [(p["step"], p["value"]) for p in coarse]
    assert (4321, -3.0) in [(p["step"], p["value"]) for p in coarse]
    too_many = requests.get(url, params={**params, "max_results": 10**9}, headers=auth, timeout=30)
    assert (
        too_many.status_code == 400 and too_many.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    )
