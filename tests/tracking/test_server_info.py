"""MLflow 3's server-info, which the client reads before it uploads an artifact."""

import pytest
import requests
from mlflow.utils import server_info as mlflow_server_info

pytestmark = pytest.mark.django_db(transaction=True)


def test_server_info_answers_mlflows_keys_without_a_login(live_server):
    for prefix in ("api", "ajax-api"):
        answer = requests.get(f"{live_server.url}/{prefix}/3.0/mlflow/server-info", timeout=30)
        assert answer.status_code == 200
        data = answer.json()
        keys = {
            getattr(mlflow_server_info, name)
            for name in dir(mlflow_server_info)
            if name.startswith("SERVER_INFO_") and name != "SERVER_INFO_ENDPOINT"
        }
        skills = {"skill_content_max_size", "skill_content_max_files"}  # MLflow may leave them out
        assert keys - skills <= set(data)
        assert data["artifact_serving_enabled"] is True
        assert data["multipart_uploads_enabled"] is False  # not unasked (a job cannot reach S3)


def test_the_client_reads_it(live_server):
    from mlflow.utils.rest_utils import MlflowHostCreds

    response = mlflow_server_info.fetch_server_info(MlflowHostCreds(live_server.url))
    assert response.status_code == 200
    assert response.data["multipart_uploads_enabled"] is False
