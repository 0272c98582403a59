"""The job page's checkpoints: only complete ones are listed; register one as a model
version, start a new job from it; outsiders get 404, viewers see but cannot act."""

import pytest
from django.urls import reverse

from checkpoints.models import ResumeSource
from checkpoints.services import begin_checkpoint
from modelhub.models import ModelVersion
from tests.checkpoints.builders import saved, sha
from tests.jobs.test_executor_api import launched

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _files(job_settings):
    pass


def test_job_page_lists_complete_checkpoints_only(client, owner, project):
    job, _ = launched(owner, project)
    saved(job, "step-42", step=42, metrics={"loss": 0.25})
    begin_checkpoint(job, {"name": "half-uploaded", "files": [{"path": "w", "size": 1, "sha256": sha(b"w")}]})
    client.force_login(owner)
    page = client.get(job.get_absolute_url()).content.decode()
    assert "step-42" in page and "loss=0.25" in page
    assert "half-uploaded" not in page
    assert "New job from it" in page


def test_register_a_checkpoint_as_a_model_version(client, owner, project):
    job, _ = launched(owner, project)
    checkpoint = saved(job, "step-9", files={"model.onnx": b"\x08\x07onnx-ish bytes"})
    client.force_login(owner)
    answer = client.post(reverse("checkpoints:checkpoint_register", args=[checkpoint.pk]), {"model_name": "digits"})
    assert answer.status_code == 302
    version = ModelVersion.objects.get(model__name="digits", model__project=project)
    assert answer.url == version.get_absolute_url()
    assert version.files.get().sha256 == sha(b"\x08\x07onnx-ish bytes")
    assert "step-9" in version.description


@pytest.mark.parametrize("name", ["x" * 5000, "\x00bad", "   "])
def test_hostile_model_names_change_nothing_or_fall_back_to_the_jobs(client, owner, project, name):
    job, _ = launched(owner, project)
    checkpoint = saved(job)
    client.force_login(owner)
    answer = client.post(reverse("checkpoints:checkpoint_register", args=[checkpoint.pk]), {"model_name": name})
    assert answer.status_code == 302
    assert not ModelVersion.objects.filter(model__name__contains="bad").exists()
    assert not ModelVersion.objects.filter(model__name__startswith="xxx").exists()
    if name.strip():  # refused with a message; a blank name falls back to the job's
        assert not ModelVersion.objects.exists()


def test_start_a_new_job_from_a_checkpoint(client, owner, project):
    job, _ = launched(owner, project)
    checkpoint = saved(job)
    client.force_login(owner)
    answer = client.post(reverse("checkpoints:checkpoint_resume", args=[checkpoint.pk]))
    source = ResumeSource.objects.get(checkpoint=checkpoint)
    assert answer.status_code == 302 and answer.url == source.job.get_absolute_url()
    assert source.job.cloned_from == job and source.job.state == "queued"


def test_outsiders_get_404_and_viewers_403(client, owner, member, outsider, project):
    job, _ = launched(owner, project)
    checkpoint = saved(job)
    url = reverse("checkpoints:checkpoint_resume", args=[checkpoint.pk])
    client.force_login(outsider)
    assert client.post(url).status_code == 404
    client.force_login(member)  # a tenant member views the project, no more
    assert client.post(url).status_code == 403
    page = client.get(job.get_absolute_url()).content.decode()
    assert checkpoint.name in page and "New job from it" not in page
    assert not ResumeSource.objects.exists()


def test_a_pending_checkpoint_cannot_be_used(client, owner, project):
    job, _ = launched(owner, project)
    pending = begin_checkpoint(job, {"name": "p", "files": [{"path": "w", "size": 1, "sha256": sha(b"w")}]})
    client.force_login(owner)
    assert client.post(reverse("checkpoints:checkpoint_resume", args=[pending.pk])).status_code == 404
