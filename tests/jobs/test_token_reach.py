"""A job submitted with a project-limited token mounts only its project's datasets,
though the token's user may read the others (checked again inside the submit's
transaction: nothing is left behind)."""

import pytest
from rest_framework.test import APIClient

from accounts import services as account_services
from datasets.services.catalog import create_dataset
from jobs.models import Job
from projects import services as project_services
from tests.datasets.builders import upload_files

pytestmark = pytest.mark.django_db


@pytest.fixture
def versions(owner, tenant, project):
    audio = project_services.create_project(actor=owner, tenant=tenant, name="Audio", slug="audio")
    found = {}
    for where in (project, audio):
        dataset = create_dataset(owner, where, name="Clips", slug="clips")
        found[where.slug] = upload_files(owner, dataset, {"a.csv": b"1\n"}).version
    return found


def submit(api, project, version):
    return api.post(
        "/api/v1/jobs/",
        {"project": project.pk, "command": "true", "inputs": [{"dataset_version": version.pk}]},
        format="json",
    )


def test_a_project_token_cannot_mount_another_projects_dataset(owner, project, versions):
    _, key = account_services.create_api_token(actor=owner, name="ci", scope="write", project=project)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    refused = submit(api, project, versions["audio"])
    assert refused.status_code == 400 and "limited to one project" in str(refused.json())
    assert not Job.objects.exists()
    assert submit(api, project, versions["vision"]).status_code == 201


def test_the_user_signed_in_may_mount_both(owner, project, versions, api_for):
    assert submit(api_for(owner), project, versions["audio"]).status_code == 201


def test_a_prediction_submitted_with_a_project_token_follows_the_same_rule(owner, project, versions):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from modelhub import services as hub_services
    from tests.modelhub.builders import safetensors_bytes

    model = hub_services.create_model(owner, project, name="digits")
    version = hub_services.upload_version(
        owner, model, [("model.safetensors", SimpleUploadedFile("m", safetensors_bytes()))]
    )
    _, key = account_services.create_api_token(actor=owner, name="ci", scope="write", project=project)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    url = f"/api/v1/model-versions/{version.pk}/predict/"
    body = {"command": "python predict.py"}
    refused = api.post(url, {**body, "inputs": [{"dataset_version": versions["audio"].pk}]}, format="json")
    assert refused.status_code == 400 and "limited to one project" in str(refused.json()), refused.content
    assert not Job.objects.exists()
    allowed = api.post(url, {**body, "inputs": [{"dataset_version": versions["vision"].pk}]}, format="json")
    assert allowed.status_code == 201, allowed.content


def test_a_project_token_cannot_rerun_a_job_that_mounts_another_projects_dataset(
    owner, project, versions, api_for
):
    from jobs.services.lifecycle import cancel_job

    submitted = submit(api_for(owner), project, versions["audio"]).json()  # signed in: allowed
    cancel_job(owner, Job.objects.get(pk=submitted["id"]))  # a finished job reruns
    _, key = account_services.create_api_token(actor=owner, name="ci", scope="write", project=project)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = api.post(f"/api/v1/jobs/{submitted['id']}/retry/")
    assert response.status_code == 400 and "limited to one project" in str(response.json())
    assert Job.objects.count() == 1
