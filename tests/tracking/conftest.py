"""The real `mlflow` client (mlflow-skinny, pinned) against a live Gantry.

`mlflow_env(token)` points the client at the live server with a Gantry API token, as a
user would with MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN; retries are off so that
an error answer fails a test at once instead of after the client's backoff.
"""

import pytest

from accounts import services as account_services
from tests.jobs.conftest import job_settings, running_jobs  # noqa: F401 - jobs' fixtures, shared


@pytest.fixture
def mlflow_env(live_server, monkeypatch):
    import mlflow
    import mlflow.tracking.fluent

    # set_experiment keeps its experiment in a global and in MLFLOW_EXPERIMENT_ID: both
    # are undone after the test, whose database (and experiment ids) go with it.
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)

    def use(token: str):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", live_server.url)
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        mlflow.set_tracking_uri(live_server.url)
        return mlflow.MlflowClient(tracking_uri=live_server.url)

    yield use
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(None)


@pytest.fixture
def token_for():
    def make(user, project=None, scope="write"):
        return account_services.create_api_token(
            actor=user, name="mlflow", scope=scope, project=project
        )[1]

    return make
