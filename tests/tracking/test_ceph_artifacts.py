"""MLflow artifacts with GANTRY_STORAGE=s3 on a real Ceph RADOS Gateway (tests/ceph.py,
the session's cluster, in the "ceph" xdist group): the proxied `log_artifact` and
`log_model` land in the bucket, and the client's presigned multipart upload
(MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD) sends a file's bytes straight to the gateway —
the requests Gantry's process saw carry none of them."""

import hashlib
import os

import mlflow
import numpy as np
import pytest
import requests
from django.core.signals import request_started

from datasets import storage
from modelhub.models import ModelVersion
from tests.datasets.conftest import ceph, s3_storage  # noqa: F401 - the session's Ceph
from tracking.models import LoggedModel, Run

pytestmark = [
    pytest.mark.services,
    pytest.mark.usefixtures("s3_storage"),
    pytest.mark.django_db(transaction=True),
]
MIB = 1024 * 1024


def objects(prefix: str) -> dict[str, int]:
    listed = storage.s3_client().list_objects_v2(Bucket=storage.bucket(), Prefix=prefix)
    return {o["Key"]: o["Size"] for o in listed.get("Contents", [])}


def object_bytes(key: str) -> bytes:
    return storage.s3_client().get_object(Bucket=storage.bucket(), Key=key)["Body"].read()


@pytest.fixture
def gantry_requests():
    """(method, path, Content-Length) of every request Gantry's live server handles."""
    seen = []

    def record(sender, environ, **kwargs):
        seen.append(
            (
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO", ""),
                int(environ.get("CONTENT_LENGTH") or 0),
            )
        )

    request_started.connect(record)
    yield seen
    request_started.disconnect(record)


def test_logged_artifacts_and_models_land_in_the_bucket(
    mlflow_env, token_for, owner, project, tmp_path
):
    from sklearn.datasets import load_digits
    from sklearn.tree import DecisionTreeClassifier

    client = mlflow_env(token_for(owner, project))
    (tmp_path / "report.txt").write_text("accuracy 0.9\n")
    x, y = load_digits(return_X_y=True)
    model = DecisionTreeClassifier(max_depth=6, random_state=0).fit(x[:800], y[:800])
    with mlflow.start_run() as active:
        mlflow.log_artifact(str(tmp_path / "report.txt"), artifact_path="reports")
        info = mlflow.sklearn.log_model(model, name="tree", serialization_format="cloudpickle")
    run = Run.objects.get(run_id=active.info.run_id)
    run_prefix = f"mlflow-artifacts/{run.experiment_id}/{run.run_id}/artifacts/"
    assert object_bytes(f"{run_prefix}reports/report.txt") == b"accuracy 0.9\n"
    logged = LoggedModel.objects.get(model_id=info.model_id)
    model_prefix = f"mlflow-artifacts/{logged.experiment_id}/models/{logged.model_id}/artifacts/"
    stored = objects(model_prefix)
    assert {f"{model_prefix}MLmodel", f"{model_prefix}model.pkl"} <= set(stored)
    assert stored[f"{model_prefix}model.pkl"] > 1000
    assert [f.path for f in client.list_artifacts(run.run_id, "reports")] == ["reports/report.txt"]
    loaded = mlflow.sklearn.load_model(info.model_uri)
    assert np.array_equal(loaded.predict(x[800:900]), model.predict(x[800:900]))
    # Registered on the model hub, whose files are in the bucket too, and loaded from there.
    version = mlflow.register_model(info.model_uri, "digits-tree")
    hub = ModelVersion.objects.get(model__name="digits-tree", number=int(version.version))
    pickled = hub.files.get(path="model.pkl")
    head = storage.s3_client().head_object(
        Bucket=storage.bucket(), Key=storage.s3_key(pickled.file.name)
    )
    assert head["ContentLength"] == pickled.size == stored[f"{model_prefix}model.pkl"]
    registered = mlflow.sklearn.load_model(f"models:/digits-tree/{version.version}")
    assert np.array_equal(registered.predict(x[900:950]), model.predict(x[900:950]))


def test_multipart_upload_goes_straight_to_the_gateway(
    mlflow_env, token_for, owner, project, tmp_path, monkeypatch, gantry_requests
):
    mlflow_env(token_for(owner, project))
    monkeypatch.setenv("MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD", "true")
    monkeypatch.setenv("MLFLOW_MULTIPART_UPLOAD_MINIMUM_FILE_SIZE", str(5 * MIB))
    monkeypatch.setenv("MLFLOW_MULTIPART_UPLOAD_CHUNK_SIZE", str(5 * MIB))
    big = os.urandom(11 * MIB + 123)  # three parts: 5 + 5 + 1 MiB
    (tmp_path / "weights.bin").write_bytes(big)
    (tmp_path / "small.txt").write_text("under the threshold: proxied")
    with mlflow.start_run() as active:
        mlflow.log_artifact(str(tmp_path / "weights.bin"), artifact_path="ckpt")
        mlflow.log_artifact(str(tmp_path / "small.txt"))
    run = Run.objects.get(run_id=active.info.run_id)
    prefix = f"mlflow-artifacts/{run.experiment_id}/{run.run_id}/artifacts/"
    stored = object_bytes(f"{prefix}ckpt/weights.bin")
    assert hashlib.sha256(stored).digest() == hashlib.sha256(big).digest()
    assert object_bytes(f"{prefix}small.txt") == b"under the threshold: proxied"
    assert not storage.s3_client().list_multipart_uploads(Bucket=storage.bucket()).get("Uploads")

    artifact_requests = [r for r in gantry_requests if "mlflow-artifacts" in r[1]]
    folder = f"{run.experiment_id}/{run.run_id}/artifacts/ckpt"
    assert ("POST", f"/api/2.0/mlflow-artifacts/mpu/create/{folder}") in {
        r[:2] for r in artifact_requests
    }
    assert ("POST", f"/api/2.0/mlflow-artifacts/mpu/complete/{folder}") in {
        r[:2] for r in artifact_requests
    }
    # The big file never passed through Gantry: every request it saw was small.
    assert not [r for r in artifact_requests if r[1].endswith("weights.bin")]
    assert sum(r[2] for r in gantry_requests) < 64 * 1024, gantry_requests
    assert max(r[2] for r in gantry_requests) < 16 * 1024


def test_an_aborted_upload_leaves_nothing_and_outsiders_cannot_start_one(
    live_server, mlflow_env, token_for, owner, outsider, project
):
    mlflow_env(token_for(owner, project))
    with mlflow.start_run() as active:
        pass
    run = Run.objects.get(run_id=active.info.run_id)
    base = f"{live_server.url}/api/2.0/mlflow-artifacts/mpu"
    folder = f"{run.experiment_id}/{run.run_id}/artifacts"
    auth = {"Authorization": f"Bearer {token_for(owner, project)}"}
    created = requests.post(
        f"{base}/create/{folder}",
        json={"path": "/home/me/model.bin", "num_parts": 2},
        headers=auth,
        timeout=30,
    )
    assert created.status_code == 200, created.text
    answer = created.json()
    assert [c["part_number"] for c in answer["credentials"]] == [1, 2]
    part = requests.put(answer["credentials"][0]["url"], data=b"x" * (5 * MIB), timeout=60)
    assert part.status_code == 200 and part.headers["ETag"]
    uploads = storage.s3_client().list_multipart_uploads(Bucket=storage.bucket())["Uploads"]
    assert [u["Key"] for u in uploads] == [f"mlflow-artifacts/{folder}/model.bin"]

    wrong = requests.post(
        f"{base}/complete/{folder}",
        json={
            "path": "model.bin",
            "upload_id": answer["upload_id"],
            "parts": [{"part_number": 2, "etag": '"nope"'}],
        },
        headers=auth,
        timeout=30,
    )
    assert wrong.status_code == 400 and wrong.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    outsider_auth = {"Authorization": f"Bearer {token_for(outsider)}"}
    for action in ("create", "abort"):
        refused = requests.post(
            f"{base}/{action}/{folder}",
            json={"path": "model.bin", "num_parts": 1, "upload_id": answer["upload_id"]},
            headers=outsider_auth,
            timeout=30,
        )
        assert refused.status_code == 404
        assert refused.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    assert len(storage.s3_client().list_multipart_uploads(Bucket=storage.bucket())["Uploads"]) == 1

    aborted = requests.post(
        f"{base}/abort/{folder}",
        json={"path": "model.bin", "upload_id": answer["upload_id"]},
        headers=auth,
        timeout=30,
    )
    assert aborted.status_code == 200 and aborted.json() == {}
    assert not storage.s3_client().list_multipart_uploads(Bucket=storage.bucket()).get("Uploads")
    assert not objects(f"mlflow-artifacts/{folder}/")
