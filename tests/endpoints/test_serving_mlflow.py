"""MLflow pyfunc endpoints with real processes: a custom `mlflow.pyfunc.PythonModel` (class
probabilities of a scikit-learn digits classifier it keeps as an artifact), saved by
`mlflow.pyfunc.save_model` here (mlflow-skinny) and registered as an MLflow version,
served by MLServer's MLflow runtime (gantry_runtime.CheckedMLflowModel, MLflow 3.17 in
.venv-serving), called through the gateway (uvicorn) with a real HTTP client in the
KServe v2 format and MLflow's /invocations. The answers are checked against the model's
own, loaded with `mlflow.pyfunc.load_model` and run here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from accounts import services as account_services
from endpoints import local, services
from modelhub import services as hub_services
from modelhub.models import ModelFormat
from tests.endpoints.builders import (
    gateway_call,
    upload_mlflow_folder,
    use_data_folder,
    v2_tensor,
)
from tests.faults.procs import Uvicorn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(local.serving_python()).exists(),
        reason="no serving virtualenv (.venv-serving): make install builds it",
    ),
]

# v1 has no signature: MLServer has no content type to decode by, and the runtime gives
# the model a NumPy array as MLflow's own server would. v2 has a tensor signature, whose
# schema MLflow enforces (float64 rows of 64 values) before the model sees the input.
SAVE = r"""
import json, pickle, sys
import numpy as np
import mlflow.pyfunc
from mlflow.models import infer_signature
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

class DigitsProba(mlflow.pyfunc.PythonModel):
    def load_context(self, context):
        with open(context.artifacts["classifier"], "rb") as f:
            self.classifier = pickle.load(f)

    def predict(self, context, model_input, params=None):
        return self.classifier.predict_proba(np.asarray(model_input, dtype=np.float64) / 16.0)

out = sys.argv[1]
x, y = load_digits(return_X_y=True)
classifier = LogisticRegression(max_iter=300).fit(x[:1500] / 16.0, y[:1500])
with open(f"{out}/classifier.pkl", "wb") as f:
    pickle.dump(classifier, f)
artifacts = {"classifier": f"{out}/classifier.pkl"}
mlflow.pyfunc.save_model(f"{out}/v1", python_model=DigitsProba(), artifacts=artifacts)
signature = infer_signature(x[:2], classifier.predict_proba(x[:2] / 16.0))
mlflow.pyfunc.save_model(f"{out}/v2", python_model=DigitsProba(), artifacts=artifacts,
                         signature=signature)
rows = x[-20:]
own = mlflow.pyfunc.load_model(f"{out}/v1").predict(rows)
json.dump({"rows": rows.tolist(), "labels": y[-20:].tolist(), "own": own.tolist()},
          open(f"{out}/sample.json", "w"))
"""


@pytest.fixture(scope="module")
def pyfunc_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits-pyfunc")
    subprocess.run(
        [sys.executable, "-c", SAVE, str(folder)], check=True, capture_output=True, timeout=300
    )
    return folder, json.loads((folder / "sample.json").read_text())


@pytest.fixture
def world(transactional_db, settings, tmp_path, owner, project, pyfunc_models):
    """A Gantry (uvicorn) over the test database; the model `digits-pyfunc` with the two
    pyfunc versions; every replica stopped afterwards."""
    data = tmp_path / "data"
    use_data_folder(settings, data)
    folder, sample = pyfunc_models
    model = hub_services.create_model(owner, project, name="digits-pyfunc")
    versions = [upload_mlflow_folder(owner, model, folder / name) for name in ("v1", "v2")]
    web = Uvicorn(tmp_path, GANTRY_DATA_DIR=str(data))
    web.start()
    token = account_services.create_api_token(actor=owner, name="t", scope="write")[1]
    try:
        yield {"web": web, "model": model, "versions": versions, "sample": sample,
               "token": token, "owner": owner, "project": project}  # fmt: skip
    finally:
        from django.db import connection

        connection.close()
        web.stop()
        local.stop_all()


def test_a_pyfunc_model_answers_through_the_gateway_as_it_answers_itself(world):
    version = world["versions"][0]
    assert version.format == ModelFormat.MLFLOW
    assert local.served_file(version) == local.Served(".", "mlflow")
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="pyfunc", model=world["model"], version=1
    )
    rows, labels, own = world["sample"]["rows"], world["sample"]["labels"], world["sample"]["own"]

    first = gateway_call(world, endpoint, {"inputs": [v2_tensor(rows)]})
    assert first.status_code == 200, first.text
    assert first.headers["Gantry-Model-Version"] == "v1"
    answer = first.json()
    assert answer["model_name"] == "pyfunc" and answer["model_version"] == "v1"
    (output,) = answer["outputs"]
    assert (output["datatype"], output["shape"]) == ("FP64", [20, 10])
    probabilities = np.array(output["data"]).reshape(20, 10)
    assert np.allclose(probabilities, own)
    assert sum(p == y for p, y in zip(probabilities.argmax(axis=1), labels, strict=True)) >= 16

    # MLflow's scoring protocol, translated by the gateway: a row of probabilities per
    # input row, as `mlflow models serve` answers.
    mlflow = gateway_call(world, endpoint, {"inputs": rows[:3]}, path="invocations")
    assert mlflow.status_code == 200, mlflow.text
    assert np.allclose(mlflow.json()["predictions"], own[:3])
    assert np.array(mlflow.json()["predictions"]).shape == (3, 10)

    # Bad payloads: 400 with the model's words, never 500.
    wrong_width = gateway_call(world, endpoint, {"inputs": [v2_tensor([[1, 2, 3]])]})
    assert wrong_width.status_code == 400
    assert "the model refused the input" in wrong_width.json()["error"]
    assert "expecting 64 features" in wrong_width.json()["error"]
    not_numbers = gateway_call(world, endpoint, {"inputs": [v2_tensor([["a"] * 64], "BYTES")]})
    assert not_numbers.status_code == 400
    assert "could not convert string to float" in not_numbers.json()["error"]
    assert gateway_call(world, endpoint, {"inputs": [v2_tensor(rows[:1])]}).status_code == 200


def test_a_pyfunc_signature_is_enforced_and_its_refusal_is_the_callers_error(world):
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="signed", model=world["model"], version=2
    )
    rows, own = world["sample"]["rows"], world["sample"]["own"]
    answer = gateway_call(world, endpoint, {"inputs": [v2_tensor(rows[:4])]})
    assert answer.status_code == 200, answer.text
    assert np.allclose(np.array(answer.json()["outputs"][0]["data"]).reshape(4, 10), own[:4])
    # The signature's metadata is the model's (MLServer reads it from MLmodel).
    metadata = httpx.get(
        world["web"].url + endpoint.gateway_path + "v2/models/signed",
        headers={"Authorization": f"Bearer {world['token']}"},
    ).json()
    assert metadata["inputs"][0]["shape"] == [-1, 64]

    # MLflow's schema enforcement refuses before the model runs, in its words but
    # without the whole input echoed back.
    wrong_type = gateway_call(world, endpoint, {"inputs": [v2_tensor(rows[:2], "FP32")]})
    assert wrong_type.status_code == 400
    error = wrong_type.json()["error"]
    assert "dtype of input float32 does not match expected dtype float64" in error
    assert "Failed to enforce schema of the input" in error and "[[" not in error
    wrong_width = gateway_call(world, endpoint, {"inputs": [v2_tensor([[1.5, 2.5, 3.5]])]})
    assert wrong_width.status_code == 400
    assert "does not match expected shape (-1, 64)" in wrong_width.json()["error"]
