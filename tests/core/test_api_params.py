"""The API's answers match its schema where fuzzing found they did not (issue 42): a bad
query value is a 400 naming the parameter (never quietly ignored), every 400 is an
object, and downloads answer with the content type the schema documents."""

import pytest

from datasets.services.catalog import create_dataset
from jobs.services.submit import submit_job
from tests.datasets.builders import upload_files

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(owner, project):
    return submit_job(owner, project, name="digits", command="python train.py")


@pytest.mark.parametrize(
    "query,parameter",
    [("worker=x", "worker"), ("after=null", "after"), ("before=1.5", "before"),
     ("limit=0", "limit"), ("worker=-1", "worker")],
)
def test_bad_log_parameters_are_a_400_object_naming_the_parameter(
    api_for, owner, job, query, parameter
):
    response = api_for(owner).get(f"/api/v1/jobs/{job.pk}/logs/?{query}")
    assert response.status_code == 400
    body = response.json()
    assert isinstance(body, dict) and list(body) == [parameter], body
    assert "whole number" in body[parameter][0]


@pytest.mark.parametrize(
    "path,parameter",
    [
        ("/api/v1/dataset-files/?version=null", "version"),
        ("/api/v1/dataset-versions/?dataset=abc", "dataset"),
        ("/api/v1/artifacts/?job=null", "job"),
        ("/api/v1/checkpoints/?job=1e3", "job"),
        ("/api/v1/model-versions/?model=none", "model"),
        ("/api/v1/jobs/{job}/metrics/?worker=null", "worker"),
        ("/api/v1/dataset-files/?version=99999999999999999999", "version"),
        # A filter's id too large for the database was a 500 (SQLite's OverflowError).
        ("/api/v1/memberships/?tenant=99999999999999999999", "tenant"),
        ("/api/v1/project-members/?project=1.5", "project"),
    ],
)
def test_a_bad_id_filter_is_refused_rather_than_ignored(api_for, owner, job, path, parameter):
    response = api_for(owner).get(path.format(job=job.pk))
    assert response.status_code == 400
    assert parameter in response.json(), response.json()


def test_a_good_id_filter_still_narrows_the_list(api_for, owner, project):
    dataset = create_dataset(owner, project, name="Digits", slug="digits")
    first = upload_files(owner, dataset, {"a.csv": b"1\n"}).version
    upload_files(owner, dataset, {"b.csv": b"2\n"})
    response = api_for(owner).get(f"/api/v1/dataset-files/?version={first.pk}")
    assert [f["path"] for f in response.json()["results"]] == ["a.csv"]
    assert api_for(owner).get("/api/v1/dataset-files/?version=").status_code == 200


def test_a_message_about_no_one_field_is_an_object_too(api_for, owner, project):
    """A serializer's message not tied to a field came back as a bare list."""
    from rest_framework.exceptions import ValidationError

    from core.api import exception_handler

    response = exception_handler(ValidationError("Not both."), {})
    assert response.data == {"non_field_errors": ["Not both."]}


def test_downloads_document_the_file_types_they_answer_with(api_for, owner, project):
    dataset = create_dataset(owner, project, name="Digits", slug="digits")
    version = upload_files(owner, dataset, {"notes.txt": b"hello\n"}).version
    api = api_for(owner)
    response = api.get(f"/api/v1/dataset-files/{version.files.get().pk}/download/")
    assert response["Content-Type"].startswith("text/plain")
    schema = api.get("/api/schema/?format=json").json()
    for path in (
        "/api/v1/dataset-files/{id}/download/",
        "/api/v1/artifacts/{id}/download/",
        "/api/v1/model-versions/{id}/download/",
    ):
        assert list(schema["paths"][path]["get"]["responses"]["200"]["content"]) == ["*/*"]
    assert "302" in schema["paths"]["/api/v1/dataset-files/{id}/download/"]["get"]["responses"]
