"""Which runtime serves a model version, and the words for what is not served: decided
from the version's files alone (no model server, no torch here). The serving runs are in
test_serving.py (scikit-learn), test_serving_torchscript.py (TorchScript) and
test_serving_mlflow.py (MLflow pyfunc)."""

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from endpoints import local, services
from endpoints.models import Endpoint
from modelhub import services as hub_services
from modelhub.models import ModelFormat
from tests.endpoints.builders import MLMODEL, torchscript_archive

pytestmark = pytest.mark.django_db


@pytest.fixture
def model(owner, project):
    return hub_services.create_model(owner, project, name="digits")


def upload(owner, model, path, content):
    return hub_services.upload_version(owner, model, [(path, SimpleUploadedFile(path, content))])


@pytest.fixture
def serving_env(monkeypatch, tmp_path):
    """serving(with_torch): a serving virtualenv's layout under tmp_path, torch in it or
    not, as the one local.serving_python names."""

    def serving(with_torch: bool):
        venv = tmp_path / ("with-torch" if with_torch else "without-torch") / ".venv-serving"
        site = venv / "lib" / "python3.11" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        if with_torch:
            (site / "torch").mkdir()
            (site / "torch" / "__init__.py").write_text("")
        monkeypatch.setattr(local, "serving_python", lambda: str(venv / "bin" / "python"))

    return serving


def test_each_format_gets_its_runtime(owner, model):
    sklearn = upload(owner, model, "MLmodel", MLMODEL)
    scripted = upload(owner, model, "net.torchscript.pt", torchscript_archive())
    assert scripted.format == ModelFormat.TORCHSCRIPT
    assert local.served_file(sklearn) == local.Served("model.pkl", "sklearn")
    assert local.served_file(scripted) == local.Served("net.torchscript.pt", "torchscript")


# What mlflow.pyfunc.save_model writes for a custom PythonModel, and for other flavors.
PYFUNC_MLMODEL = b"""flavors:
  python_function:
    loader_module: mlflow.pyfunc.model
    python_model: python_model.pkl
"""
PYTORCH_MLMODEL = b"""flavors:
  python_function:
    loader_module: mlflow.pytorch
    data: data
  pytorch:
    model_data: data
"""
SKOPS_MLMODEL = b"""flavors:
  python_function:
    loader_module: mlflow.sklearn
    model_path: model.skops
  sklearn:
    pickled_model: model.skops
    serialization_format: skops
"""


def test_an_mlflow_model_without_the_sklearn_flavor_is_served_by_its_pyfunc(owner, model):
    pyfunc = upload(owner, model, "MLmodel", PYFUNC_MLMODEL)
    assert local.served_file(pyfunc) == local.Served(".", "mlflow")
    # A scikit-learn model MLServer's scikit-learn runtime cannot unpickle: MLflow loads it.
    skops = upload(owner, model, "MLmodel", SKOPS_MLMODEL)
    assert local.served_file(skops) == local.Served(".", "mlflow")
    # The scikit-learn flavor keeps its own runtime.
    sklearn = upload(owner, model, "MLmodel", MLMODEL)
    assert local.served_file(sklearn).runtime == "sklearn"
    tensorflow = upload(owner, model, "MLmodel", b"flavors:\n  tensorflow: {}\n")
    with pytest.raises(ValueError, match=r"neither the scikit-learn nor the python_function"):
        local.served_file(tensorflow)


def test_an_mlflow_model_whose_flavor_needs_torch_says_what_to_run_without_it(
    owner, project, model, serving_env
):
    version = upload(owner, model, "MLmodel", PYTORCH_MLMODEL)
    assert local.served_file(version) == local.Served(".", "mlflow", ("torch",))
    serving_env(with_torch=False)
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(owner, project, name="digits", model=model, version=1)
    message = " ".join(refused.value.message_dict["version"])
    assert "This MLflow model's flavor needs torch in the serving environment" in message
    assert "run `make serving-torch`" in message
    serving_env(with_torch=True)
    endpoint = services.create_endpoint(owner, project, name="digits", model=model, version=1)
    assert endpoint.version.number == 1


def test_mlflow_endpoints_on_kubernetes_need_an_image_with_mlflows_runtime(settings):
    settings.GANTRY_K8S_ENDPOINT_IMAGE = "docker.io/seldonio/mlserver:1.7.1-sklearn"
    missing = local.runtime_missing(local.Served(".", "mlflow"), "kubernetes")
    assert "need MLServer's MLflow runtime (mlserver-mlflow)" in missing
    assert "build platform/images/serving" in missing
    settings.GANTRY_K8S_ENDPOINT_IMAGE = "registry.lab/gantry/serving:1"
    assert local.runtime_missing(local.Served(".", "mlflow"), "kubernetes") == ""


def test_models_needing_torch_run_on_kubernetes_in_the_torch_image(settings):
    scripted, pytorch = local.Served("m.pt", "torchscript"), local.Served(".", "mlflow", ("torch",))
    assert scripted.needs_torch and pytorch.needs_torch
    assert not local.Served(".", "mlflow", ("xgboost",)).needs_torch
    settings.GANTRY_K8S_TORCH_IMAGE = ""
    settings.GANTRY_K8S_ENDPOINT_IMAGE = "registry.lab/gantry/serving:1"
    for served in (scripted, pytorch):
        assert "GANTRY_K8S_TORCH_IMAGE names none" in local.runtime_missing(served, "kubernetes")
    settings.GANTRY_K8S_TORCH_IMAGE = "registry.lab/gantry/serving:1-torch"
    assert local.runtime_missing(scripted, "kubernetes") == ""
    assert local.runtime_missing(pytorch, "kubernetes") == ""


def test_a_torchscript_endpoint_is_created_where_the_serving_environment_has_torch(
    owner, project, model, serving_env
):
    serving_env(with_torch=True)
    upload(owner, model, "net.torchscript.pt", torchscript_archive())
    endpoint = services.create_endpoint(owner, project, name="digits", model=model, version=1)
    assert endpoint.version.number == 1


def test_a_torchscript_endpoint_without_torch_says_what_to_run(
    owner, project, model, serving_env, settings, tmp_path
):
    serving_env(with_torch=False)
    version = upload(owner, model, "net.torchscript.pt", torchscript_archive())
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(owner, project, name="digits", model=model, version=1)
    message = " ".join(refused.value.message_dict["version"])
    assert "need PyTorch in the serving environment" in message
    assert "run `make serving-torch`" in message
    assert not Endpoint.objects.exists()

    # An endpoint made before torch went (or by another machine) says the same at start.
    serving_env(with_torch=True)
    endpoint = services.create_endpoint(owner, project, name="digits", model=model, version=1)
    serving_env(with_torch=False)
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    replica = local.Replica(endpoint.pk, version.pk)
    with pytest.raises(local.ReplicaError, match="run `make serving-torch`"):
        local.start(endpoint, version, replica)
    assert not local.running(replica)


def test_a_pytorch_state_dict_and_other_formats_are_refused_in_words(owner, project, model):
    upload(owner, model, "model.pt", b"\x80\x02weights, not TorchScript")
    upload(owner, model, "model.onnx", b"onnx")
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(owner, project, name="weights", model=model, version=1)
    message = " ".join(refused.value.message_dict["version"])
    assert "a state_dict cannot be served without its code" in message
    assert "torch.jit.script" in message
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(owner, project, name="onnx", model=model, version=2)
    message = " ".join(refused.value.message_dict["version"])
    assert "is in the ONNX format" in message
    assert "MLflow models (pyfunc) and TorchScript models" in message
    assert not Endpoint.objects.exists()


def test_the_replica_is_told_its_runtime(owner, project, model, serving_env, tmp_path):
    serving_env(with_torch=True)
    version = upload(owner, model, "net.torchscript.pt", torchscript_archive())
    endpoint = services.create_endpoint(owner, project, name="digits", model=model, version=1)
    served = local.served_file(version)
    replica = local.Replica(endpoint.pk, version.pk)
    argv = local.server_argv(endpoint, version, replica, tmp_path, served)
    # serve_model.py SOCKET RUNTIME MODEL_FILE NAME VERSION IDLE_SECONDS, sandboxed or not
    runtime = argv.index("torchscript")
    assert argv[runtime - 1].endswith(local.SOCKET)
    assert argv[runtime + 1].endswith("/net.torchscript.pt")
    assert argv[runtime + 2 :] == ["digits", "v1", str(endpoint.idle_seconds)]
