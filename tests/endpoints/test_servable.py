"""Which runtime serves a model version, and the words for what is not served: decided
from the version's files alone (no model server, no torch here). The serving runs are in
test_serving.py (scikit-learn) and test_serving_torchscript.py (TorchScript)."""

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
    assert "MLflow models of the scikit-learn flavor and TorchScript models" in message
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
