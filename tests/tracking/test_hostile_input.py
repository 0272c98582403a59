"""Bad input gets MLflow's error answer, never a 500: every endpoint, every field given
values of the wrong type."""

import itertools
import json

import pytest

from accounts import services as account_services
from tracking import urls

pytestmark = pytest.mark.django_db

FIELDS = [
    "experiment_id",
    "experiment_ids",
    "name",
    "new_name",
    "tags",
    "run_id",
    "run_uuid",
    "key",
    "value",
    "timestamp",
    "step",
    "metrics",
    "params",
    "status",
    "end_time",
    "start_time",
    "run_name",
    "filter",
    "order_by",
    "max_results",
    "page_token",
    "view_type",
    "run_view_type",
    "metric_key",
    "datasets",
    "version",
    "alias",
    "source",
    "description",
    "model_id",
    "run_ids",
    "start_step",
    "end_step",
]
WEIRD = [None, 7, -1, 1.5, True, [], [1], {}, {"a": [1]}, "", "x" * 10_000, "../../x", "0", "NaN"]


def test_no_endpoint_answers_500_to_wrong_types(client, owner, project):
    _, token = account_services.create_api_token(
        actor=owner, name="t", scope="write", project=project
    )
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    paths = [f"/api/2.0/{p.pattern}" for p in urls.urlpatterns if "<" not in str(p.pattern)]
    paths += [
        "/api/2.0/mlflow/logged-models/m-1",
        "/api/2.0/mlflow-artifacts/artifacts/1/x/artifacts/a",
        "/api/2.0/mlflow-artifacts/mpu/create/1/x/artifacts",
        "/api/2.0/mlflow-artifacts/mpu/complete/1/x/artifacts",
        "/api/2.0/mlflow-artifacts/mpu/abort/1/x/artifacts",
        "/ajax-api/2.0/mlflow/runs/log-batch",
    ]
    answered = 0
    for path, i in itertools.product(paths, range(0, len(WEIRD), 3)):
        weird = WEIRD[i]
        body = {field: WEIRD[(i + n) % len(WEIRD)] for n, field in enumerate(FIELDS)}
        body[FIELDS[i % len(FIELDS)]] = weird
        for method in ("get", "post", "patch", "delete"):
            if method == "get":
                query = {k: v for k, v in body.items() if isinstance(v, str | int | float)}
                response = getattr(client, method)(path, query, **auth)
            else:
                response = getattr(client, method)(
                    path, json.dumps(body), content_type="application/json", **auth
                )
            assert response.status_code < 500, (method, path, body, response.content[:300])
            if response.status_code >= 400 and response["Content-Type"] == "application/json":
                assert "error_code" in response.json() or "detail" in response.json()
            answered += 1
    assert answered == len(paths) * len(range(0, len(WEIRD), 3)) * 4
