"""MLflow's model registry on Gantry's model hub, with the real client."""

from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.exceptions import MlflowException

from modelhub import services as hub
from modelhub.models import Alias, ModelVersion, RegisteredModel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def digits():
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def _log(x, y):
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=200).fit(x[:400], y[:400])
    with mlflow.start_run() as run:
        mlflow.log_param("max_iter", 200)
        mlflow.log_metric("accuracy", float(model.score(x[400:], y[400:])))
        info = mlflow.sklearn.log_model(model, name="model", serialization_format="cloudpickle")
    return model, run, info


def test_register_model_shows_in_the_hub_with_lineage_and_loads_back(
    mlflow_env, token_for, owner, project, digits
):
    client = mlflow_env(token_for(owner, project))
    x, y = digits
    model, run, info = _log(x, y)
    registered = mlflow.register_model(info.model_uri, "digits")
    assert registered.name == "digits" and registered.version == "1"
    hub_model = RegisteredModel.objects.get(project=project, name="digits")
    version = ModelVersion.objects.get(model=hub_model, number=1)
    assert version.format == "mlflow" and version.primary_file == "MLmodel"
    assert version.parameters == {"max_iter": "200"} and "accuracy" in version.metrics
    assert set(version.files.values_list("path", flat=True)) >= {"MLmodel", "model.pkl"}
    assert client.get_model_version("digits", "1").run_id == run.info.run_id

    client.set_registered_model_alias("digits", "champion", "1")
    assert Alias.objects.get(model=hub_model, name="champion").version == version
    assert client.get_model_version_by_alias("digits", "champion").version == "1"
    loaded = mlflow.sklearn.load_model("models:/digits@champion")
    assert np.array_equal(loaded.predict(x[400:450]), model.predict(x[400:450]))
    loaded = mlflow.sklearn.load_model("models:/digits/1")
    assert np.array_equal(loaded.predict(x[:20]), model.predict(x[:20]))
    client.set_model_version_tag("digits", "1", "validated", "yes")
    assert client.get_model_version("digits", "1").tags == {"validated": "yes"}
    client.delete_registered_model_alias("digits", "champion")
    assert not Alias.objects.filter(model=hub_model).exists()
    assert [m.name for m in client.search_registered_models(filter_string="name LIKE 'dig%'")] == [
        "digits"
    ]
    assert [v.version for v in client.search_model_versions("name = 'digits'")] == ["1"]


def test_a_version_uploaded_in_gantry_is_visible_to_mlflow_client(
    mlflow_env, token_for, owner, project, tmp_path
):
    from django.core.files.base import ContentFile

    hub_model = hub.create_model(owner, project, name="resnet")
    hub.upload_version(
        owner, hub_model, [("weights.onnx", ContentFile(b"onnx-bytes", name="weights.onnx"))]
    )
    client = mlflow_env(token_for(owner, project))
    version = client.get_model_version("resnet", "1")
    assert version.source.startswith("mlflow-artifacts:/registry/")
    path = mlflow.artifacts.download_artifacts(
        artifact_uri=client.get_model_version_download_uri("resnet", "1"), dst_path=str(tmp_path)
    )
    assert (Path(path) / "weights.onnx").read_bytes() == b"onnx-bytes"


def test_outsiders_do_not_see_registered_models_and_viewers_cannot_register(
    mlflow_env, token_for, owner, member, outsider, project
):
    mlflow_env(token_for(owner, project))
    mlflow.MlflowClient().create_registered_model("digits")
    outsider_client = mlflow_env(token_for(outsider))
    with pytest.raises(MlflowException) as exc:
        outsider_client.get_registered_model("lab-a/vision/digits")
    assert exc.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    viewer = mlflow_env(token_for(member, project))
    assert viewer.get_registered_model("digits").name == "digits"
    with pytest.raises(MlflowException) as exc:
        viewer.create_registered_model("other")
    assert exc.value.error_code == "PERMISSION_DENIED"
    assert list(RegisteredModel.objects.values_list("name", flat=True)) == ["digits"]
