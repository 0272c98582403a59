"""Jobs that name a code snapshot: submit checks, clone, the API and the agent API."""

import hashlib

import pytest

from jobs.models import Job
from jobs.services.launch import make_token
from jobs.services.submit import clone_job, submit_job
from jobs.states import transition
from projects import services as project_services
from snapshots.services import create_snapshot
from tests.snapshots.builders import make_snapshot, manifest

pytestmark = pytest.mark.django_db

CODE = {"hello.py": b"print('hello from the snapshot')\n"}


def test_a_job_keeps_its_snapshot_through_the_api_and_a_clone(api_for, owner, project):
    snapshot = make_snapshot(owner, project, CODE)
    api = api_for(owner)
    response = api.post(
        "/api/v1/jobs/",
        {"project": project.pk, "command": "python hello.py", "code_snapshot": snapshot.pk},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["code_snapshot"] == snapshot.pk
    job = Job.objects.get(pk=response.json()["id"])
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["code_snapshot"] == snapshot.pk
    assert clone_job(owner, job).code_snapshot_id == snapshot.pk


def test_a_snapshot_of_another_project_is_refused(api_for, owner, project, tenant):
    other = project_services.create_project(actor=owner, tenant=tenant, name="Audio", slug="audio")
    snapshot = make_snapshot(owner, other, CODE)
    response = api_for(owner).post(
        "/api/v1/jobs/",
        {"project": project.pk, "command": "python hello.py", "code_snapshot": snapshot.pk},
        format="json",
    )
    assert response.status_code == 400
    assert "belongs to project Audio" in str(response.json()["code_snapshot"])
    assert not Job.objects.exists()


def test_a_pending_or_unknown_or_foreign_snapshot_is_refused(
    api_for, owner, outsider, project, other_project
):
    pending, _ = create_snapshot(owner, project, manifest({"new.py": b"pending only\n"}))
    theirs = make_snapshot(outsider, other_project, CODE)
    for value, message in ((pending.pk, "still uploading"), (theirs.pk, "No such"),
                           (999999, "No such"), ("x", "valid integer")):
        response = api_for(owner).post(
            "/api/v1/jobs/",
            {"project": project.pk, "command": "python hello.py", "code_snapshot": value},
            format="json",
        )
        assert response.status_code == 400, (value, response.content)
        assert message in str(response.json()), (value, response.json())
    assert not Job.objects.exists()


def _launched(owner, project, secret, **spec):
    """A job as launch leaves it: starting, with a token (no processes needed here)."""
    job = submit_job(owner, project, command="python hello.py", **spec)
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token(secret))
    return job


def test_the_job_token_reads_its_code_and_nothing_else(client, owner, project):
    snapshot = make_snapshot(owner, project, CODE)
    other = make_snapshot(owner, project, {"other.py": b"not this job's\n"})
    job = _launched(owner, project, "s3cret", code_snapshot=snapshot)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {make_token(0, 's3cret')}"}
    spec = client.get(f"/api/v1/executor/jobs/{job.pk}/spec", **auth).json()
    assert spec["code"] == f"/api/v1/executor/jobs/{job.pk}/code"
    manifest_body = client.get(spec["code"], **auth).json()
    (entry,) = manifest_body["files"]
    assert entry["path"] == "hello.py" and entry["mode"] == 0o644
    data = b"".join(client.get(entry["url"], **auth).streaming_content)
    assert data == CODE["hello.py"]
    foreign = hashlib.sha256(b"not this job's\n").hexdigest()
    assert other.files.get().sha256 == foreign
    url = f"/api/v1/executor/jobs/{job.pk}/code-files/{foreign}"
    assert client.get(url, **auth).status_code == 404
    plain = _launched(owner, project, "other")
    plain_auth = {"HTTP_AUTHORIZATION": f"Bearer {make_token(0, 'other')}"}
    assert client.get(f"/api/v1/executor/jobs/{plain.pk}/code", **plain_auth).status_code == 404


def test_the_job_form_submits_code_and_inputs_and_the_job_page_lists_them(
    client_for, owner, project
):
    from datasets.services.catalog import create_dataset
    from tests.datasets.builders import upload_files

    snapshot = make_snapshot(owner, project, CODE, git={"commit": "c" * 40, "dirty": True, "branch": "main"})
    dataset = create_dataset(owner, project, name="Digits", slug="digits")
    version = upload_files(owner, dataset, {"train.csv": b"a,b\n1,2\n"}).version
    client = client_for(owner)
    form = client.get(f"/projects/{project.pk}/jobs/new/").content.decode()
    assert f"Code #{snapshot.pk}: 1 file" in form and "Digits v1 (Vision)" in form
    assert 'webkitdirectory' in form
    response = client.post(
        f"/projects/{project.pk}/jobs/new/",
        {"kind": "train", "command": "python hello.py", "cpus": 1, "gpus": 0,
         "memory_mb": 512, "max_retries": 0, "priority": 0,
         "code_snapshot": snapshot.pk, "dataset_versions": [version.pk]},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    job = Job.objects.get()
    assert job.code_snapshot == snapshot
    assert job.inputs == [
        {"dataset_version": version.pk, "dataset": "digits", "version": 1, "mount": "data/digits"}
    ]
    page = client.get(job.get_absolute_url()).content.decode()
    assert f'href="/code/{snapshot.pk}/"' in page and "cccccccccc" in page
    assert f'href="/dataset-versions/{version.pk}/"' in page and "data/digits" in page
    clone = client.get(f"/jobs/{job.pk}/clone/").content.decode()
    assert f'<option value="{snapshot.pk}" selected>' in clone
    assert f'<option value="{version.pk}" selected>' in clone


def test_the_job_form_refuses_another_projects_code(client_for, owner, project, tenant):
    other = project_services.create_project(actor=owner, tenant=tenant, name="Audio", slug="audio")
    snapshot = make_snapshot(owner, other, CODE)
    response = client_for(owner).post(
        f"/projects/{project.pk}/jobs/new/",
        {"kind": "train", "command": "python hello.py", "cpus": 1, "gpus": 0,
         "memory_mb": 512, "max_retries": 0, "priority": 0, "code_snapshot": snapshot.pk},
    )
    assert response.status_code == 400  # the form again, with its error
    assert "Select a valid choice" in response.content.decode()
    assert not Job.objects.exists()


def test_a_prediction_runs_with_code_and_the_form_offers_it(api_for, client_for, owner, project):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from modelhub import services as hub_services
    from tests.modelhub.builders import safetensors_bytes

    snapshot = make_snapshot(owner, project, {"examples/predict_digits.py": b"print(1)\n"})
    model = hub_services.create_model(owner, project, name="digits")
    version = hub_services.upload_version(
        owner, model, [("model.safetensors", SimpleUploadedFile("m", safetensors_bytes()))]
    )
    response = api_for(owner).post(
        f"/api/v1/model-versions/{version.pk}/predict/",
        {"command": "python examples/predict_digits.py", "code_snapshot": snapshot.pk},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["code_snapshot"] == snapshot.pk
    form = client_for(owner).get(f"/model-versions/{version.pk}/predict/").content.decode()
    assert f"Code #{snapshot.pk}: 1 file" in form
