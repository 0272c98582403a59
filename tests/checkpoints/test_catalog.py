"""The checkpoint catalog through the executor API: a checkpoint exists in Gantry only
once every file arrived with its announced hash; tenants never see each other's."""

import io

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from checkpoints.models import Checkpoint, CheckpointState
from checkpoints.services import latest_complete, start_job_from, tenant_checkpoint_blobs
from datasets.services.quotas import tenant_usage
from jobs.signals import job_alert
from projects.permissions import get_object_for_user
from tests.checkpoints.builders import saved, sha
from tests.jobs.test_executor_api import auth, launched, url

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _files(job_settings):
    """Blobs and job files beside tmp_path."""

A, B = b"first file", b"second file, longer"


def announce(client, job, token, name="step-10", files=None):
    files = files if files is not None else {"a.bin": A, "sub/b.bin": B}
    body = {
        "name": name,
        "step": 10,
        "metrics": {"loss": 0.5},
        "files": [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in files.items()],
    }
    return client.post(
        url(job, "checkpoints"), body, content_type="application/json", **auth(token)
    )


def put(client, job, token, cid, path, data, digest=None):
    return client.generic(
        "PUT",
        url(job, f"checkpoints/{cid}/files/{path}"),
        data,
        content_type="application/octet-stream",
        HTTP_X_GANTRY_SHA256=digest or sha(data),
        **auth(token),
    )


def commit(client, job, token, cid):
    return client.post(url(job, f"checkpoints/{cid}/commit"), {}, content_type="application/json", **auth(token))


def latest(client, job, token):
    return client.get(url(job, "checkpoints/latest"), **auth(token)).json()["checkpoint"]


def test_checkpoint_is_listed_only_after_every_file_arrived(client, owner, project):
    job, token = launched(owner, project)
    begun = announce(client, job, token).json()
    assert begun["state"] == "pending" and sorted(begun["missing"]) == ["a.bin", "sub/b.bin"]
    assert put(client, job, token, begun["id"], "a.bin", A).status_code == 200

    refused = commit(client, job, token, begun["id"])
    assert refused.status_code == 409 and "sub/b.bin" in refused.json()["detail"]
    assert not Checkpoint.objects.complete().filter(job=job).exists()
    assert latest(client, job, token) is None

    assert put(client, job, token, begun["id"], "sub/b.bin", B).status_code == 200
    done = commit(client, job, token, begun["id"]).json()
    assert done["state"] == "complete"
    found = latest(client, job, token)
    assert found["name"] == "step-10" and found["step"] == 10
    assert {f["path"] for f in found["files"]} == {"a.bin", "sub/b.bin"}
    download = client.get(url(job, f"checkpoints/{found['id']}/files/sub/b.bin"), **auth(token))
    assert b"".join(download.streaming_content) == B


def test_bad_hash_is_refused_and_the_checkpoint_stays_unlisted(client, owner, project):
    job, token = launched(owner, project)
    begun = announce(client, job, token, files={"a.bin": A}).json()
    # Bytes that do not match what was announced (header honest about the wrong bytes).
    wrong = put(client, job, token, begun["id"], "a.bin", b"tampered!!", sha(b"tampered!!"))
    assert wrong.status_code == 400 and "announced" in wrong.json()["detail"]
    lying = put(client, job, token, begun["id"], "a.bin", b"tampered!!", sha(A))
    assert lying.status_code == 400 and "does not match" in lying.json()["detail"]
    assert commit(client, job, token, begun["id"]).status_code == 409
    assert Checkpoint.objects.get(pk=begun["id"]).state == CheckpointState.PENDING
    assert latest_complete(job) is None


def test_announcing_again_skips_a_complete_checkpoint(client, owner, project):
    job, token = launched(owner, project)
    saved(job, "step-10", {"a.bin": A})
    again = announce(client, job, token, files={"a.bin": A}).json()
    assert again["state"] == "complete" and again["missing"] == []


@pytest.mark.parametrize(
    "body,message",
    [
        ({"name": "../up", "files": [{"path": "a", "size": 1, "sha256": "0" * 64}]}, "name"),
        ({"name": "ok", "files": [{"path": "/etc/passwd", "size": 1, "sha256": "0" * 64}]}, "path"),
        ({"name": "ok", "files": [{"path": "a", "size": -1, "sha256": "0" * 64}]}, "size"),
        ({"name": "ok", "files": [{"path": "a", "size": 1, "sha256": "xyz"}]}, "sha256"),
        ({"name": "ok", "files": []}, "files"),
        ({"name": "ok", "step": "ten", "files": [{"path": "a", "size": 1, "sha256": "0" * 64}]}, "step"),
    ],
)
def test_bad_announcements_are_refused_and_change_nothing(client, owner, project, body, message):
    job, token = launched(owner, project)
    answer = client.post(url(job, "checkpoints"), body, content_type="application/json", **auth(token))
    assert answer.status_code == 400 and message in answer.json()["detail"]
    assert not Checkpoint.objects.exists()


def test_another_jobs_token_reaches_nothing(client, owner, project, outsider, other_project):
    job, _token = launched(owner, project)
    other, other_token = launched(outsider, other_project, secret="other")
    mine = saved(job)
    stolen = client.get(url(job, f"checkpoints/{mine.pk}/files/model.pt"), **auth(other_token))
    assert stolen.status_code == 404
    sideways = client.get(url(other, f"checkpoints/{mine.pk}/files/model.pt"), **auth(other_token))
    assert sideways.status_code == 404
    assert commit(client, other, other_token, mine.pk).status_code == 404


def test_outsiders_get_404_and_viewers_cannot_start_jobs_from_a_checkpoint(
    owner, member, outsider, project
):
    job, _ = launched(owner, project)
    checkpoint = saved(job)
    with pytest.raises(Http404):
        get_object_for_user(outsider, Checkpoint, "checkpoint.view", pk=checkpoint.pk)
    assert Checkpoint.objects.visible_to(outsider).count() == 0
    assert Checkpoint.objects.visible_to(owner).count() == 1
    # A tenant member views the project but is not a developer of it.
    assert get_object_for_user(member, Checkpoint, "checkpoint.view", pk=checkpoint.pk)
    with pytest.raises(PermissionDenied):
        start_job_from(member, checkpoint)


def test_a_job_started_from_a_checkpoint_resumes_from_it(owner, project):
    job, _ = launched(owner, project)
    checkpoint = saved(job, "step-5", step=5)
    clone = start_job_from(owner, checkpoint)
    assert clone.cloned_from == job
    assert latest_complete(clone) == checkpoint
    own = saved(clone, "step-7", step=7)
    assert latest_complete(clone) == own


def test_checkpoint_storage_counts_in_the_tenants_quota(owner, project, other_project):
    job, _ = launched(owner, project)
    before = tenant_usage(project.tenant)
    saved(job, files={"w.bin": b"x" * 1000})
    assert tenant_usage(project.tenant) == before + 1000
    assert tenant_usage(other_project.tenant) == 0
    assert list(tenant_checkpoint_blobs(other_project.tenant)) == []


def test_quota_refuses_a_checkpoint_that_does_not_fit(client, owner, project, settings):
    from datasets.models import StorageQuota

    StorageQuota.objects.create(tenant=project.tenant, bytes=10)
    job, token = launched(owner, project)
    answer = announce(client, job, token)
    assert answer.status_code == 400 and "storage" in answer.json()["detail"]
    assert not Checkpoint.objects.exists()


def test_a_saved_checkpoint_is_announced_once_committed(owner, project, django_capture_on_commit_callbacks):
    heard = []

    def receiver(sender, job, kind, message, **kwargs):
        heard.append((job.pk, kind, message))

    job_alert.connect(receiver)
    try:
        job, _ = launched(owner, project)
        with django_capture_on_commit_callbacks(execute=True):
            saved(job, "step-3", step=3)
    finally:
        job_alert.disconnect(receiver)
    assert heard and heard[0][:2] == (job.pk, "checkpoint_saved") and "step 3" in heard[0][2]


def test_commit_checks_the_blob_is_in_storage(owner, project):
    from django.core.files.storage import default_storage

    from checkpoints.services import (
        CheckpointProblem,
        begin_checkpoint,
        commit_checkpoint,
        receive_file,
    )
    from datasets.models import blob_key

    job, _ = launched(owner, project)
    data = b"vanishing bytes"
    c = begin_checkpoint(job, {"name": "v", "files": [{"path": "f", "size": len(data), "sha256": sha(data)}]})
    receive_file(c, "f", io.BytesIO(data), sha(data))
    default_storage.delete(blob_key(sha(data)))
    with pytest.raises(CheckpointProblem):
        commit_checkpoint(c)
    assert latest_complete(job) is None


def test_resume_takes_the_furthest_step_even_if_an_older_one_arrived_later(owner, project):
    job, _ = launched(owner, project)
    saved(job, "step-20", step=20, files={"w": b"twenty"})
    saved(job, "step-10", step=10, files={"w": b"ten"})  # e.g. uploaded again after a requeue
    assert latest_complete(job).step == 20
