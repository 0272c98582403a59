"""A bare experiment or model name with a token that reaches several projects: it means
the user's default project (Settings), or it is refused with what to set; it never
lands on an object of another project."""

import mlflow
import pytest
import requests
from mlflow.exceptions import MlflowException

from accounts import services as account_services
from modelhub.models import RegisteredModel
from projects import services as project_services
from tracking.models import Experiment, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def nlp(tenant, owner):
    return project_services.create_project(actor=owner, tenant=tenant, name="NLP", slug="nlp")


@pytest.fixture
def vision_digits(mlflow_env, token_for, owner, project):
    client = mlflow_env(token_for(owner, project))
    return client.create_experiment("digits")


def _get_by_name(live_server, token, name):
    return requests.get(
        f"{live_server.url}/api/2.0/mlflow/experiments/get-by-name",
        params={"experiment_name": name},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_without_a_default_project_a_bare_name_is_refused_with_what_to_set(
    mlflow_env, live_server, token_for, owner, project, nlp, vision_digits
):
    token = token_for(owner)
    mlflow_env(token)
    answer = _get_by_name(live_server, token, "does-not-exist")
    assert answer.status_code == 400
    assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert "default project" in answer.json()["message"]
    with pytest.raises(MlflowException) as exc:
        mlflow.set_experiment("new-name")
    assert "Settings > API tokens" in exc.value.message
    assert "tenant/project/new-name" in exc.value.message
    # Not even an existing name in one of the projects is taken for it.
    assert _get_by_name(live_server, token, "digits").status_code == 400
    assert not Experiment.objects.filter(name="new-name").exists()


def test_with_a_default_project_set_experiment_creates_there(
    mlflow_env, live_server, token_for, owner, project, nlp, vision_digits
):
    account_services.set_default_project(actor=owner, project=nlp)
    token = token_for(owner)
    mlflow_env(token)
    missing = _get_by_name(live_server, token, "does-not-exist")
    assert missing.status_code == 404
    assert missing.json() == {
        "error_code": "RESOURCE_DOES_NOT_EXIST",
        "message": "Experiment 'does-not-exist' does not exist.",
    }
    made = mlflow.set_experiment("new-name")
    with mlflow.start_run() as run:
        mlflow.log_metric("loss", 0.5)
    stored = Run.objects.get(run_id=run.info.run_id).experiment
    assert stored.pk == int(made.experiment_id)
    assert (stored.project, stored.name) == (nlp, "new-name")
    # A name the other project has means the default project's own, made anew.
    digits = mlflow.set_experiment("digits")
    assert digits.experiment_id != vision_digits
    assert Experiment.objects.get(pk=int(digits.experiment_id)).project == nlp
    # The full name still reaches the other project.
    assert mlflow.set_experiment("lab-a/vision/digits").experiment_id == vision_digits


def test_a_default_project_the_user_no_longer_sees_is_not_used(
    mlflow_env, live_server, token_for, owner, member, project, nlp
):
    account_services.set_default_project(actor=member, project=nlp)
    project_services.update_project(actor=owner, project=nlp, visibility="private")
    token = token_for(member)
    # The member sees only `project` now: their only project, so bare names mean it.
    assert _get_by_name(live_server, token, "nothing").json()["error_code"] == (
        "RESOURCE_DOES_NOT_EXIST"
    )


def test_register_model_by_bare_name_lands_in_the_default_project(
    mlflow_env, token_for, owner, project, nlp
):
    from sklearn.dummy import DummyClassifier

    mlflow_env(token_for(owner))
    model = DummyClassifier().fit([[0], [1]], [0, 1])
    account_services.set_default_project(actor=owner, project=nlp)
    mlflow.set_experiment("clf")
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            model, name="m", serialization_format="cloudpickle", registered_model_name="clf"
        )
    assert RegisteredModel.objects.get(name="clf").project == nlp

    account_services.set_default_project(actor=owner, project=None)
    experiment_id = mlflow.get_experiment_by_name("lab-a/nlp/clf").experiment_id
    with mlflow.start_run(experiment_id=experiment_id), pytest.raises(MlflowException) as exc:
        mlflow.sklearn.log_model(
            model, name="m", serialization_format="cloudpickle", registered_model_name="other"
        )
    assert "Registered model 'other' names no project" in exc.value.message
    assert "experiment" not in exc.value.message
    assert not RegisteredModel.objects.filter(name="other").exists()
