"""What the jobs API answers is what its OpenAPI schema says (schemathesis found these
apart): a job event without an actor, a job's artifacts as a page, a log page's count,
and a method a route does not take."""

import hashlib
import io

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from jobs.services.ingestion import ingest_logs
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from jobs.states import transition

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def response_schema(schema, path, method="get", status="200"):
    content = schema["paths"][path][method]["responses"][status]["content"]["application/json"]
    ref = content["schema"]["$ref"].rsplit("/", 1)[-1]
    return schema["components"]["schemas"][ref]


@pytest.fixture
def api(owner):
    client = APIClient()
    client.force_authenticate(owner)
    return client


@pytest.fixture
def job(owner, project):
    return submit_job(owner, project, name="schema", command="python -c pass")


def store(job, path, data=b"x"):
    return store_artifact(job, 0, path, io.BytesIO(data), hashlib.sha256(data).hexdigest())[0]


def test_an_event_gantry_made_itself_has_a_null_actor_as_the_schema_allows(schema, api, job):
    assert transition(job, "admitted", "admitted (no one did it)")
    events = api.get(f"/api/v1/jobs/{job.pk}/").json()["events"]
    assert [e["actor"] for e in events] == ["olivia", None]
    actor = schema["components"]["schemas"]["JobEvent"]["properties"]["actor"]
    assert actor["type"] == "string" and actor["nullable"] is True


def test_a_jobs_artifacts_come_a_page_at_a_time_like_every_list(schema, api, job):
    for name in ("b.txt", "a.txt", "c.txt"):
        store(job, name)
    body = api.get(f"/api/v1/jobs/{job.pk}/artifacts/?page_size=2").json()
    assert body["count"] == 3 and body["next"] and body["previous"] is None
    assert [a["path"] for a in body["results"]] == ["a.txt", "b.txt"]
    page = response_schema(schema, "/api/v1/jobs/{id}/artifacts/")
    assert {"count", "results"} <= set(page["required"])


def test_a_log_page_counts_the_workers_lines(schema, api, job):
    ingest_logs(job, 0, [{"seq": n, "stream": "stdout", "ts": 1.0, "text": f"line {n}"} for n in range(1, 8)])
    page = api.get(f"/api/v1/jobs/{job.pk}/logs/?after=2&limit=3").json()
    assert page["count"] == 7 and [line["seq"] for line in page["results"]] == [3, 4, 5]
    assert page["next_after"] == 5 and page["complete"] is False
    back = api.get(f"/api/v1/jobs/{job.pk}/logs/?before=3").json()
    assert back["count"] == 7 and [line["seq"] for line in back["results"]] == [1, 2]
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/?worker=1").json()["count"] == 0
    declared = response_schema(schema, "/api/v1/jobs/{id}/logs/")
    assert {"worker", "count", "results", "complete"} <= set(declared["required"])
    assert set(page) <= set(declared["properties"])


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_a_method_a_download_does_not_take_answers_405(api, job, method):
    artifact = store(job, "model.bin")
    response = getattr(api, method)(f"/api/v1/artifacts/{artifact.pk}/download/")
    assert response.status_code == 405, response.content
    assert response["Allow"].startswith("GET")
    assert "No permission rule" not in response.content.decode()


def test_a_method_refused_is_still_refused_to_nobody(job):
    artifact = store(job, "model.bin")
    assert APIClient().post(f"/api/v1/artifacts/{artifact.pk}/download/").status_code in (401, 403)


def test_a_method_the_viewset_turned_off_answers_405(api, owner, tenant):
    from images import services as image_services

    image = image_services.create_image(owner, tenant, name="base", reference="registry.example/base:1")
    response = api.put(f"/api/v1/images/{image.pk}/", {"name": "x"}, format="json")
    assert response.status_code == 405 and "PATCH" in response["Allow"]
