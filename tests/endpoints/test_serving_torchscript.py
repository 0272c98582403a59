"""TorchScript endpoints with real processes: the PyTorch example (examples/train_digits.py)
trained for two epochs, its model.torchscript.pt registered as a TorchScript version and
served by Gantry's TorchScript runtime in MLServer (endpoints/runtime/gantry_runtime.py),
called through the gateway (uvicorn) with a real HTTP client in the KServe v2 format and
MLflow's /invocations. The answers are checked against the model's own, run here with
torch (the test may import torch; Gantry never does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts import services as account_services
from endpoints import local, services
from endpoints.models import Endpoint
from modelhub import services as hub_services
from modelhub.models import ModelFormat
from tests.endpoints.builders import gateway_call, use_data_folder, v2_tensor
from tests.faults.procs import Uvicorn
from tests.jobs.test_examples import EXAMPLES, required_module

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(local.serving_python()).exists(),
        reason="no serving virtualenv (.venv-serving): make install builds it",
    ),
    pytest.mark.skipif(
        bool(local.runtime_missing(local.Served("", "torchscript"))) and os.environ.get("CI") != "true",
        reason="no torch in .venv-serving: make serving-torch installs it",
    ),
]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The PyTorch example's outputs after two epochs (model.pt, model.torchscript.pt),
    and 20 held-out digits as rows of 64 raw pixel values, with their labels."""
    required_module("torch")
    from sklearn.datasets import load_digits

    outputs = tmp_path_factory.mktemp("digits-torch")
    env = {
        **os.environ,
        "GANTRY_OUTPUTS_DIR": str(outputs),
        "GANTRY_METRICS_FILE": str(outputs.parent / "metrics.jsonl"),
    }
    subprocess.run(
        [sys.executable, str(EXAMPLES / "train_digits.py"), "--epochs", "2",
         "--tensorboard-dir", ""],
        env=env, cwd=outputs.parent, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    digits = load_digits()
    return outputs, {"rows": digits.data[-20:].tolist(), "labels": digits.target[-20:].tolist()}


def own_answer(model_file: Path, rows) -> np.ndarray:
    """The model's logits for `rows`, computed here with torch."""
    import torch

    scripted = torch.jit.load(str(model_file), map_location="cpu")
    with torch.no_grad():
        return scripted(torch.tensor(rows, dtype=torch.float32)).numpy()


@pytest.fixture
def world(transactional_db, settings, tmp_path, owner, project, example):
    """A Gantry (uvicorn) over the test database; the model `digits-torch` whose v1 is
    the example's model.torchscript.pt; every replica stopped afterwards."""
    data = tmp_path / "data"
    use_data_folder(settings, data)
    outputs, sample = example
    model = hub_services.create_model(owner, project, name="digits-torch")
    scripted = outputs / "model.torchscript.pt"
    version = hub_services.upload_version(
        owner, model, [(scripted.name, SimpleUploadedFile(scripted.name, scripted.read_bytes()))]
    )
    web = Uvicorn(tmp_path, GANTRY_DATA_DIR=str(data))
    web.start()
    token = account_services.create_api_token(actor=owner, name="t", scope="write")[1]
    try:
        yield {"web": web, "model": model, "version": version, "sample": sample,
               "token": token, "owner": owner, "project": project, "outputs": outputs}  # fmt: skip
    finally:
        from django.db import connection

        connection.close()
        web.stop()
        local.stop_all()


def test_the_pytorch_example_answers_through_the_gateway_as_it_answers_itself(world):
    version = world["version"]
    assert version.format == ModelFormat.TORCHSCRIPT
    assert local.served_file(version) == local.Served("model.torchscript.pt", "torchscript")
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="digits-torch", model=world["model"], version=1
    )
    rows, labels = world["sample"]["rows"], world["sample"]["labels"]
    logits = own_answer(world["outputs"] / "model.torchscript.pt", rows)

    first = gateway_call(world, endpoint, {"inputs": [v2_tensor(rows)]})
    assert first.status_code == 200, first.text
    assert first.headers["Gantry-Model-Version"] == "v1"
    assert int(first.headers["Gantry-Cold-Start-Ms"]) > 0
    answer = first.json()
    assert answer["model_name"] == "digits-torch" and answer["model_version"] == "v1"
    predict, raw = answer["outputs"]
    assert (predict["name"], predict["datatype"], predict["shape"]) == ("predict", "INT64", [20, 1])
    assert predict["data"] == logits.argmax(axis=1).tolist()
    assert (raw["name"], raw["datatype"], raw["shape"]) == ("output-0", "FP32", [20, 10])
    assert np.allclose(np.array(raw["data"]).reshape(20, 10), logits, rtol=1e-4, atol=1e-5)
    # Two epochs learned something: most of these digits are right.
    assert sum(p == y for p, y in zip(predict["data"], labels, strict=True)) >= 14

    # MLflow's scoring protocol, translated by the gateway: the class of each row.
    mlflow = gateway_call(world, endpoint, {"inputs": rows[:3]}, path="invocations")
    assert mlflow.status_code == 200, mlflow.text
    assert mlflow.json() == {"predictions": predict["data"][:3]}

    # A request may name the outputs it wants (FP32 in, as a client of a float model sends).
    only_raw = gateway_call(world, endpoint, {"inputs": [v2_tensor(rows[:2], "FP32")],
                                      "outputs": [{"name": "output-0"}]})  # fmt: skip
    assert only_raw.status_code == 200, only_raw.text
    assert [o["name"] for o in only_raw.json()["outputs"]] == ["output-0"]

    # Bad payloads: 400 with the runtime's message, never 500.
    wrong_width = gateway_call(world, endpoint, {"inputs": [v2_tensor([[1, 2, 3]])]})
    assert wrong_width.status_code == 400
    error = wrong_width.json()["error"]
    assert "expected rows of 64 pixel values (0..16), got a tensor of shape [1, 3]" in error
    assert "Traceback" not in error
    not_numbers = gateway_call(world, endpoint, {"inputs": [v2_tensor([["a"] * 64], "BYTES")]})
    assert not_numbers.status_code == 400
    assert "no tensor of numbers" in not_numbers.json()["error"]
    short = gateway_call(world, endpoint, {"inputs": [{**v2_tensor(rows[:1]), "shape": [2, 64]}]})
    assert short.status_code == 400 and "cannot reshape" in short.json()["error"]
    unknown = gateway_call(world, endpoint, {"inputs": [v2_tensor(rows[:1])], "outputs": [{"name": "proba"}]})
    assert unknown.status_code == 400
    assert "no output 'proba' (its outputs: predict, output-0)" in unknown.json()["error"]
    assert gateway_call(world, endpoint, {"inputs": [v2_tensor(rows[:1])]}).status_code == 200


def test_a_state_dict_is_refused_at_creation_with_what_to_do(db, owner, project, example):
    outputs, _ = example
    model = hub_services.create_model(owner, project, name="digits-weights")
    state_dict = outputs / "model.pt"
    upload = SimpleUploadedFile(state_dict.name, state_dict.read_bytes())
    version = hub_services.upload_version(owner, model, [(state_dict.name, upload)])
    assert version.format == ModelFormat.PYTORCH
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(owner, project, name="weights", model=model, version=1)
    message = " ".join(refused.value.message_dict["version"])
    assert "a state_dict cannot be served without its code" in message
    assert "torch.jit.script" in message and "TorchScript version" in message
    assert not Endpoint.objects.exists()
