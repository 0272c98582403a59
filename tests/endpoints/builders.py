"""Endpoints' test data, built as a user would: scikit-learn digits models saved by MLflow
(`mlflow.sklearn.save_model`, what `log_model` stores), uploaded to the model hub."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
from django.core.files.uploadedfile import SimpleUploadedFile

from endpoints import services
from endpoints.models import Endpoint
from modelhub import services as hub_services

TRAIN = r"""
import json, sys
import mlflow.sklearn
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
out = sys.argv[1]
x, y = load_digits(return_X_y=True)
x = x / 16.0
for name, c in (("v1", 1.0), ("v2", 0.05)):
    model = LogisticRegression(C=c, max_iter=300).fit(x[:1500], y[:1500])
    mlflow.sklearn.save_model(model, f"{out}/{name}", serialization_format="cloudpickle")
json.dump({"rows": x[1500:1520].tolist(), "labels": y[1500:1520].tolist()}, open(f"{out}/sample.json", "w"))
"""

# What mlflow.sklearn.save_model writes as MLmodel, for versions nothing runs (access tests).
MLMODEL = b"""flavors:
  python_function:
    loader_module: mlflow.sklearn
    model_path: model.pkl
  sklearn:
    pickled_model: model.pkl
    serialization_format: cloudpickle
"""


def train_digits_models(folder: Path) -> dict:
    """Two digits classifiers (v1, v2) as MLflow model folders under `folder`, and 20
    held-out rows with their labels."""
    subprocess.run([sys.executable, "-c", TRAIN, str(folder)], check=True, timeout=300)
    return json.loads((folder / "sample.json").read_text())


def upload_mlflow_folder(owner, model, folder: Path):
    files = [
        (str(p.relative_to(folder)), SimpleUploadedFile(p.name, p.read_bytes()))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]
    return hub_services.upload_version(owner, model, files)


def access_objects(project, owner):
    """An endpoint of lab-a (nothing started) for the generated access tests."""
    model = hub_services.create_model(owner, project, name="served")
    version = hub_services.upload_version(
        owner,
        model,
        [
            ("MLmodel", SimpleUploadedFile("MLmodel", MLMODEL)),
            ("model.pkl", SimpleUploadedFile("model.pkl", b"not loaded here")),
        ],
    )
    endpoint = services.create_endpoint(
        owner, project, name="served", model=model, version=version.number
    )
    return {Endpoint: endpoint}


def torchscript_archive() -> bytes:
    """The layout torch.jit.save writes (what the model hub recognises), no real module."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("digits/code/__torch__.py", "")
        archive.writestr("digits/constants.pkl", b"")
        archive.writestr("digits/data.pkl", b"")
    return buffer.getvalue()


WAIT = 120  # a safety net against hanging, never a timing assertion


def use_data_folder(settings, data: Path) -> None:
    """Jobs and stored files under `data`: the data folder the test's Gantry (uvicorn,
    GANTRY_DATA_DIR) runs on, so the test process and the server see the same files."""
    settings.GANTRY_JOBS_DIR = data / "jobs"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": data / "files"},
        },
    }


def gateway_call(world, endpoint, body, token=None, path=None) -> httpx.Response:
    """POST `body` to the endpoint through the gateway of the test's Gantry (world["web"])
    with `token` (world["token"] by default): its KServe v2 infer path unless `path`."""
    path = path or f"v2/models/{endpoint.name}/infer"
    return httpx.post(
        world["web"].url + endpoint.gateway_path + path,
        json=body,
        headers={"Authorization": f"Bearer {token or world['token']}"},
        timeout=WAIT,
    )


def v2_tensor(rows, datatype="FP64") -> dict:
    """One KServe v2 input tensor of `rows`."""
    return {
        "name": "input-0",
        "shape": [len(rows), len(rows[0])],
        "datatype": datatype,
        "data": [v for row in rows for v in row],
    }
