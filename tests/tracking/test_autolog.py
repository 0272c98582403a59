"""`mlflow.sklearn.autolog()` against a live Gantry: a scikit-learn model trained on the
bundled digits dataset, with no MLflow call but autolog itself. Asserted on what Gantry
stored (parameters, training metrics, tags, the dataset input, the logged model) and on
the model loading back from Gantry. PyTorch Lightning's autolog is not covered here: it
is not installed, and the platform's test environment does not pull in torch for it."""

import mlflow
import numpy as np
import pytest

from tracking.models import LatestMetric, LoggedModel, Param, Run, RunTag

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def autolog():
    yield mlflow.sklearn.autolog
    mlflow.sklearn.autolog(disable=True)


def test_sklearn_autolog_logs_params_metrics_and_a_loadable_model(
    autolog, mlflow_env, token_for, owner, project
):
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    client = mlflow_env(token_for(owner, project))
    x, y = load_digits(return_X_y=True)
    autolog(silent=True)
    with mlflow.start_run(run_name="autolog-digits") as active:
        model = LogisticRegression(max_iter=150, C=0.5).fit(x[:600], y[:600])

    run = Run.objects.get(run_id=active.info.run_id)
    assert run.experiment.project == project and run.status == "FINISHED"
    params = dict(Param.objects.filter(run=run).values_list("key", "value"))
    assert params["C"] == "0.5" and params["max_iter"] == "150"
    latest = dict(LatestMetric.objects.filter(run=run).values_list("key", "value"))
    assert latest["training_accuracy_score"] == pytest.approx(model.score(x[:600], y[:600]))
    assert {"training_f1_score", "training_log_loss", "training_score"} <= set(latest)
    tags = dict(RunTag.objects.filter(run=run).values_list("key", "value"))
    assert tags["estimator_name"] == "LogisticRegression"
    assert tags["estimator_class"] == "sklearn.linear_model._logistic.LogisticRegression"

    # The model autolog logged is an MLflow 3 logged model of this run, in Gantry's storage.
    logged = LoggedModel.objects.get(run=run)
    assert logged.status == "LOGGED_MODEL_READY" and logged.experiment.project == project
    loaded = mlflow.sklearn.load_model(f"models:/{logged.model_id}")
    assert np.array_equal(loaded.predict(x[600:700]), model.predict(x[600:700]))
    by_run = mlflow.pyfunc.load_model(f"runs:/{run.run_id}/model")
    assert np.array_equal(by_run.predict(x[:20]), model.predict(x[:20]))

    # What the client reads back is what Gantry stored.
    fetched = client.get_run(run.run_id)
    assert fetched.data.params["C"] == "0.5"
    assert fetched.data.metrics["training_accuracy_score"] == pytest.approx(
        latest["training_accuracy_score"]
    )
    assert [m.model_id for m in fetched.outputs.model_outputs] == [logged.model_id]
    assert fetched.inputs.dataset_inputs, "autolog logs the training data as a dataset input"
