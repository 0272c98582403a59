"""The model hub: versions from jobs and uploads, lineage, aliases, comparing, prediction jobs,
and the pages and API over them."""

import hashlib
import io

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.models import AuditEvent
from jobs.models import Job, JobImage
from jobs.services.ingestion import ingest_metrics
from jobs.services.launch import make_token
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from modelhub import services
from modelhub.models import Alias, AliasMove, ModelFile, ModelVersion, RegisteredModel
from tests.modelhub.builders import safetensors_bytes

pytestmark = pytest.mark.django_db


def finished_job(owner, project, *, files=None, metrics=(), state="succeeded", inputs=None, **spec):
    spec = {"command": "python train.py", "parameters": {"lr": 0.01, "epochs": 3}, **spec}
    job = submit_job(owner, project, **spec)
    for path, data in (files or {"model.pt": b"\x80\x02weights", "meta.json": b"{}"}).items():
        store_artifact(
            job, 0, path, io.BytesIO(data), hashlib.sha256(data).hexdigest()
        )
    ingest_metrics(
        job,
        0,
        [
            {"seq": i + 1, "name": name, "value": value, "step": i}
            for i, (name, value) in enumerate(metrics)
        ],
    )
    # As if the executor had reported it; inputs as the datasets app pins them at submit.
    Job.objects.filter(pk=job.pk).update(state=state, inputs=inputs or [])
    job.refresh_from_db()
    return job


@pytest.fixture
def model(project, owner):
    return services.create_model(owner, project, name="digits", card="# Digits")


def upload(model, user, data=None, name="model.safetensors"):
    return services.upload_version(
        user, model, [(name, SimpleUploadedFile(name, data or safetensors_bytes()))]
    )


# --- registering ----------------------------------------------------------------------------


def test_register_from_a_job_copies_files_metrics_and_lineage(project, owner):
    inputs = [{"dataset_version": 11, "dataset": "digits-csv", "version": 3, "mount": "data"}]
    job = finished_job(
        owner,
        project,
        inputs=inputs,
        metrics=[("loss", 0.9), ("accuracy", 0.5), ("loss", 0.2), ("accuracy", 0.97)],
    )
    JobImage.objects.create(
        job=job, reference="reg.example/gantry/pytorch", digest="sha256:" + "1" * 64
    )
    version = services.register_version_from_job(owner, job, model_name="digits")
    assert (
        version.number == 1 and version.format == "pytorch" and version.primary_file == "model.pt"
    )
    assert version.metrics == {"accuracy": 0.97, "loss": 0.2}
    assert version.parameters == {"lr": 0.01, "epochs": 3}
    assert version.inputs == inputs and version.image_digest == "sha256:" + "1" * 64
    files = {f.path: f for f in version.files.all()}
    assert set(files) == {"model.pt", "meta.json"}
    assert files["model.pt"].sha256 == hashlib.sha256(b"\x80\x02weights").hexdigest()
    assert files["model.pt"].file.name.startswith(f"models/{version.model_id}/{version.pk}/")
    assert version.size == sum(f.size for f in files.values())
    again = services.register_version_from_job(owner, job, model=version.model, paths=["model.pt"])
    assert again.number == 2 and [f.path for f in again.files.all()] == ["model.pt"]


def test_a_job_that_did_not_succeed_is_not_registered(project, owner):
    job = finished_job(owner, project, state="failed")
    with pytest.raises(ValidationError, match="has not succeeded"):
        services.register_version_from_job(owner, job, model_name="digits")
    assert not RegisteredModel.objects.exists()


def test_an_unknown_format_is_refused_and_nothing_is_left(project, owner, model):
    job = finished_job(owner, project, files={"notes.txt": b"hello"})
    before = (
        set(default_storage.listdir("models")[0]) if default_storage.exists("models") else set()
    )
    with pytest.raises(ValidationError, match="Unknown model format"):
        services.register_version_from_job(owner, job, model=model)
    with pytest.raises(ValidationError, match="Unknown model format"):
        services.upload_version(owner, model, [("x.bin", SimpleUploadedFile("x.bin", b"??"))])
    assert not ModelVersion.objects.exists() and not ModelFile.objects.exists()
    after = set(default_storage.listdir("models")[0]) if default_storage.exists("models") else set()
    assert after == before


def test_a_viewer_cannot_register_and_an_outsider_cannot_see(model, member, outsider):
    with pytest.raises(PermissionDenied):
        upload(model, member)
    assert not RegisteredModel.objects.visible_to(outsider).exists()


def test_upload_refuses_paths_that_escape(model, owner):
    with pytest.raises(ValidationError, match="not a usable relative file name"):
        services.upload_version(owner, model, [("../x.pt", SimpleUploadedFile("x", b"x"))])


# --- aliases --------------------------------------------------------------------------------


def test_aliases_move_between_versions_and_the_moves_are_recorded(model, owner):
    v1, v2 = upload(model, owner), upload(model, owner)
    services.set_alias(owner, model, "production", 1)
    services.set_alias(owner, model, "production", v2)
    assert Alias.objects.get(model=model, name="production").version == v2
    moves = list(AliasMove.objects.filter(model=model).order_by("pk"))
    assert [(m.from_version, m.to_version) for m in moves] == [(None, v1), (v1, v2)]
    assert AuditEvent.objects.filter(action="model.alias").count() == 2
    services.remove_alias(owner, model, "production")
    assert not Alias.objects.exists() and AliasMove.objects.count() == 3


def test_an_alias_on_a_missing_version_is_refused(model, owner):
    upload(model, owner)
    with pytest.raises(ValidationError, match="has no version 7"):
        services.set_alias(owner, model, "staging", 7)
    with pytest.raises(ValidationError, match="lowercase"):
        services.set_alias(owner, model, "Prod Uction", 1)
    assert not Alias.objects.exists() and not AliasMove.objects.exists()


def test_only_maintainers_move_aliases(model, owner, member):
    upload(model, owner)
    with pytest.raises(PermissionDenied):
        services.set_alias(member, model, "production", 1)


# --- comparing and lineage ------------------------------------------------------------------


def test_compare_puts_metrics_and_parameters_side_by_side(project, owner):
    a = services.register_version_from_job(
        owner, finished_job(owner, project, metrics=[("acc", 0.9)]), model_name="m"
    )
    b = services.register_version_from_job(
        owner,
        finished_job(owner, project, metrics=[("acc", 0.95)], parameters={"lr": 0.01, "epochs": 5}),
        model_name="m",
    )
    rows = services.compare_versions(a, b)
    assert rows["metrics"] == [{"name": "acc", "a": 0.9, "b": 0.95, "same": False}]
    assert {r["name"]: r["same"] for r in rows["parameters"]} == {"epochs": False, "lr": True}


# --- prediction -----------------------------------------------------------------------------


def test_predict_stages_the_model_files_into_the_job(model, owner):
    version = upload(model, owner)
    job = services.predict(owner, version, command="python examples/predict_digits.py")
    staged = job.inputs[0]
    assert staged["mount"] == "model" and job.parameters["model"] == "model/model.safetensors"
    entry = staged["files"][0]
    model_file = version.files.get()
    assert entry == {
        "path": "model.safetensors",
        "url": reverse("executor-model-file", args=[model_file.pk]),
        "size": model_file.size,
        "sha256": model_file.sha256,
    }


def test_predict_refuses_bad_inputs_and_submits_nothing(model, owner):
    version = upload(model, owner)
    with pytest.raises(ValidationError):
        services.predict(owner, version, command="python p.py", inputs={"not": "a list"})
    assert not Job.objects.exists()


def test_the_job_token_downloads_its_projects_model_files_only(
    model, owner, outsider, other_project, client
):
    version = upload(model, owner)
    job = services.predict(owner, version, command="python p.py")
    secret = "s3cret-for-test"
    Job.objects.filter(pk=job.pk).update(token_hash=Job.hash_token(secret), state="running")
    url = job.inputs[0]["files"][0]["url"]
    response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {make_token(0, secret)}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == safetensors_bytes()
    assert client.get(url).status_code == 401
    assert client.get(url, HTTP_AUTHORIZATION="Bearer gjt_0_wrong").status_code == 404
    foreign = submit_job(outsider, other_project, command="python -c pass")
    Job.objects.filter(pk=foreign.pk).update(token_hash=Job.hash_token("other"), state="running")
    assert client.get(url, HTTP_AUTHORIZATION="Bearer gjt_0_other").status_code == 404


# --- pages and API --------------------------------------------------------------------------


def test_the_model_card_is_rendered_and_sanitized(model, owner, client_for):
    services.update_model(
        owner,
        model,
        card="## Usage\n\n<script>alert(1)</script>\n\n| a | b |\n|---|---|\n| 1 | 2 |",
    )
    body = client_for(owner).get(model.get_absolute_url()).content.decode()
    assert "<h2>Usage</h2>" in body and "<table>" in body
    assert "<script>alert(1)</script>" not in body


def test_the_model_page_shows_versions_aliases_and_lineage(project, owner, member, client_for):
    job = finished_job(
        owner, project, inputs=[{"mount": "data", "dataset": "digits-csv", "version": 2}]
    )
    version = services.register_version_from_job(owner, job, model_name="digits")
    services.set_alias(owner, version.model, "production", version)
    body = client_for(member).get(version.model.get_absolute_url()).content.decode()
    assert "production" in body and "digits-csv" in body and f"#{job.pk}" in body


def test_the_register_button_registers_from_the_job_page(project, owner, client_for):
    job = finished_job(owner, project)
    client = client_for(owner)
    assert (
        reverse("modelhub:register_from_job", args=[job.pk])
        in client.get(job.get_absolute_url()).content.decode()
    )
    response = client.post(
        reverse("modelhub:register_from_job", args=[job.pk]), {"model_name": "from page"}
    )
    version = ModelVersion.objects.get(model__name="from page")
    assert response.status_code == 302 and response.url == version.get_absolute_url()


def test_the_model_list_query_count_does_not_grow(
    project, owner, client_for, django_assert_max_num_queries
):
    for i in range(6):
        m = services.create_model(owner, project, name=f"m{i}")
        upload(m, owner)
        services.set_alias(owner, m, "production", 1)
    client = client_for(owner)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("modelhub:model_list"))
    assert response.status_code == 200 and response.content.decode().count("production") >= 6


def test_download_gives_a_file_or_the_whole_version(model, owner, client_for):
    version = upload(model, owner)
    client = client_for(owner)
    url = reverse("modelhub:version_download", args=[version.pk])
    one = client.get(url, {"path": "model.safetensors"})
    assert b"".join(one.streaming_content) == safetensors_bytes()
    assert client.get(url, {"path": "missing"}).status_code == 404
    import zipfile

    archive = zipfile.ZipFile(io.BytesIO(b"".join(client.get(url).streaming_content)))
    assert archive.namelist() == ["model.safetensors"]


def test_api_registers_from_a_job_sets_aliases_and_predicts(project, owner, api_for):
    api = api_for(owner)
    job = finished_job(owner, project, metrics=[("acc", 0.9)])
    created = api.post(
        "/api/v1/model-versions/", {"job": job.pk, "model_name": "api"}, format="json"
    )
    assert created.status_code == 201, created.content
    version = created.json()
    assert version["metrics"] == {"acc": 0.9} and version["source_job"] == job.pk
    model_id = version["model"]
    missing = api.post(
        f"/api/v1/models/{model_id}/alias/", {"name": "prod", "version": 9}, format="json"
    )
    assert missing.status_code == 400 and "no version 9" in str(missing.json())
    moved = api.post(
        f"/api/v1/models/{model_id}/alias/", {"name": "prod", "version": 1}, format="json"
    )
    assert moved.json()["aliases"] == [
        {"name": "prod", "version": 1, "updated_at": moved.json()["aliases"][0]["updated_at"]}
    ]
    predicted = api.post(
        f"/api/v1/model-versions/{version['id']}/predict/",
        {"command": "python examples/predict_digits.py"},
        format="json",
    )
    assert (
        predicted.status_code == 201 and predicted.json()["parameters"]["model"] == "model/model.pt"
    )
    compare = api.get(f"/api/v1/models/{model_id}/compare/", {"a": 1, "b": 1})
    assert compare.json()["metrics"][0]["same"] is True


def test_api_upload_of_an_unknown_format_is_a_400(model, owner, api_for):
    response = api_for(owner).post(
        "/api/v1/model-versions/",
        {"model": model.pk, "files": [SimpleUploadedFile("notes.txt", b"hi")]},
        format="multipart",
    )
    assert response.status_code == 400 and "Unknown model format" in str(response.json())
