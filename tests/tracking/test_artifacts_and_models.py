"""Artifacts through MLflow's proxy routes onto Gantry's storage, and MLflow 3's logged
models: `log_artifact`, `log_model` and `load_model` with the real client."""

from pathlib import Path

import mlflow
import numpy as np
import pytest
import requests
from django.core.files.storage import default_storage
from mlflow.exceptions import MlflowException

from tracking.models import LoggedModel, Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_artifacts_land_in_gantrys_storage_and_come_back(
    mlflow_env, token_for, owner, project, tmp_path
):
    client = mlflow_env(token_for(owner, project))
    (tmp_path / "notes.txt").write_text("first")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "loss.csv").write_text("step,loss\n0,1.0\n")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(tmp_path / "notes.txt"))
        mlflow.log_artifacts(str(tmp_path / "plots"), artifact_path="plots")
        mlflow.log_text("second", "notes.txt")  # overwrites, as MLflow does
    stored = Run.objects.get(run_id=run.info.run_id)
    root = f"mlflow-artifacts/{stored.experiment_id}/{stored.run_id}/artifacts"
    with default_storage.open(f"{root}/notes.txt") as fh:
        assert fh.read() == b"second"
    assert default_storage.exists(f"{root}/plots/loss.csv")
    listing = client.list_artifacts(run.info.run_id)
    assert [(f.path, f.is_dir) for f in listing] == [("notes.txt", False), ("plots", True)]
    assert [f.path for f in client.list_artifacts(run.info.run_id, "plots")] == ["plots/loss.csv"]
    local = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="plots", dst_path=str(tmp_path / "out")
    )
    assert (Path(local) / "loss.csv").read_text() == "step,loss\n0,1.0\n"


def test_outsiders_and_paths_out_are_refused(
    mlflow_env, live_server, token_for, owner, outsider, project
):
    mlflow_env(token_for(owner, project))
    with mlflow.start_run() as run:
        mlflow.log_text("secret", "a.txt")
    stored = Run.objects.get(run_id=run.info.run_id)
    base = f"{live_server.url}/api/2.0/mlflow-artifacts/artifacts/{stored.experiment_id}/{stored.run_id}/artifacts"
    outsider_auth = {"Authorization": f"Bearer {token_for(outsider)}"}
    got = requests.get(f"{base}/a.txt", headers=outsider_auth, timeout=30)
    assert got.status_code == 404 and got.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    put = requests.put(f"{base}/b.txt", data=b"x", headers=outsider_auth, timeout=30)
    assert put.status_code == 404
    listing = requests.get(
        f"{live_server.url}/api/2.0/mlflow-artifacts/artifacts",
        params={"path": f"{stored.experiment_id}/{stored.run_id}/artifacts"},
        headers=outsider_auth,
        timeout=30,
    )
    assert listing.status_code == 404
    owner_auth = {"Authorization": f"Bearer {token_for(owner, project)}"}
    sneaky = requests.put(
        f"{base}/%2E%2E/%2E%2E/other/x.txt", data=b"x", headers=owner_auth, timeout=30
    )
    assert sneaky.status_code in (400, 404)
    assert not default_storage.exists(f"mlflow-artifacts/{stored.experiment_id}/other/x.txt")
    assert not default_storage.exists(
        f"mlflow-artifacts/{stored.experiment_id}/{stored.run_id}/artifacts/b.txt"
    )


def test_log_model_and_load_model_back_from_gantry(mlflow_env, token_for, owner, project):
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    mlflow_env(token_for(owner, project))
    x, y = load_digits(return_X_y=True)
    model = LogisticRegression(max_iter=200).fit(x[:500], y[:500])
    with mlflow.start_run() as run:
        info = mlflow.sklearn.log_model(
            model,
            name="digits-model",
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
        )
    logged = LoggedModel.objects.get(model_id=info.model_id)
    assert logged.run.run_id == run.info.run_id and logged.status == "LOGGED_MODEL_READY"
    assert logged.experiment.project == project
    root = f"mlflow-artifacts/{logged.experiment_id}/models/{logged.model_id}/artifacts"
    assert default_storage.exists(f"{root}/MLmodel")
    loaded = mlflow.sklearn.load_model(info.model_uri)
    assert np.array_equal(loaded.predict(x[500:600]), model.predict(x[500:600]))
    by_run = mlflow.sklearn.load_model(f"runs:/{run.info.run_id}/digits-model")
    assert np.array_equal(by_run.predict(x[:50]), model.predict(x[:50]))


def test_an_outsider_cannot_load_a_logged_model(mlflow_env, token_for, owner, outsider, project):
    from sklearn.dummy import DummyClassifier

    mlflow_env(token_for(owner, project))
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            DummyClassifier().fit([[0], [1]], [0, 1]), name="m", serialization_format="cloudpickle"
        )
    mlflow_env(token_for(outsider))
    with pytest.raises(MlflowException) as exc:
        mlflow.sklearn.load_model(info.model_uri)
    assert exc.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_multipart_upload_on_the_filesystem_falls_back_to_the_proxy(
    mlflow_env, live_server, token_for, owner, project, tmp_path, monkeypatch
):
    mlflow_env(token_for(owner, project))
    monkeypatch.setenv("MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD", "true")
    monkeypatch.setenv("MLFLOW_MULTIPART_UPLOAD_MINIMUM_FILE_SIZE", "1024")
    (tmp_path / "weights.bin").write_bytes(b"w" * 4096)
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(tmp_path / "weights.bin"))
    stored = Run.objects.get(run_id=run.info.run_id)
    folder = f"{stored.experiment_id}/{stored.run_id}/artifacts"
    with default_storage.open(f"mlflow-artifacts/{folder}/weights.bin") as fh:
        assert fh.read() == b"w" * 4096
    # What the client got from `create` to make it fall back: MLflow's 501.
    answer = requests.post(
        f"{live_server.url}/api/2.0/mlflow-artifacts/mpu/create/{folder}",
        json={"path": "weights.bin", "num_parts": 1},
        headers={"Authorization": f"Bearer {token_for(owner, project)}"},
        timeout=30,
    )
    assert answer.status_code == 501 and answer.json()["error_code"] == "NOT_IMPLEMENTED"


def test_the_ajax_api_prefix_answers_like_the_api_and_keeps_outsiders_out(
    mlflow_env, live_server, token_for, owner, outsider, project
):
    mlflow_env(token_for(owner, project))
    with mlflow.start_run() as run:
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
    query = {"run_ids": run.info.run_id, "metric_key": "loss", "max_results": 10}
    owner_auth = {"Authorization": f"Bearer {token_for(owner, project)}"}
    answers = [
        requests.get(
            f"{live_server.url}{prefix}/mlflow/metrics/get-history-bulk-interval",
            params=query,
            headers=owner_auth,
            timeout=30,
        )
        for prefix in ("/api/2.0", "/ajax-api/2.0")
    ]
    assert answers[0].status_code == answers[1].status_code == 200
    assert answers[1].json() == answers[0].json()
    assert [m["step"] for m in answers[1].json()["metrics"]] == [0, 1, 2, 3, 4]
    # The UI's ajax-only read: one metric over several runs.
    with mlflow.start_run() as other:
        mlflow.log_metric("loss", 9.0, step=0)
    bulk = requests.get(
        f"{live_server.url}/ajax-api/2.0/mlflow/metrics/get-history-bulk",
        params={"run_id": [run.info.run_id, other.info.run_id], "metric_key": "loss"},
        headers=owner_auth,
        timeout=30,
    )
    assert bulk.status_code == 200
    assert sorted((m["run_id"], m["step"]) for m in bulk.json()["metrics"]) == sorted(
        [(run.info.run_id, s) for s in range(5)] + [(other.info.run_id, 0)]
    )
    outsider_answer = requests.get(
        f"{live_server.url}/ajax-api/2.0/mlflow/runs/get",
        params={"run_id": run.info.run_id},
        headers={"Authorization": f"Bearer {token_for(outsider)}"},
        timeout=30,
    )
    assert outsider_answer.status_code == 404
    assert outsider_answer.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    anonymous = requests.post(
        f"{live_server.url}/ajax-api/2.0/mlflow/runs/delete",
        json={"run_id": run.info.run_id},
        timeout=30,
    )
    assert anonymous.status_code == 401
    assert Run.objects.get(run_id=run.info.run_id).lifecycle_stage == "active"
