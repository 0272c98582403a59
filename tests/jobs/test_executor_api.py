"""The executor-facing endpoints: job tokens, de-duplication, artifacts."""

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import services as account_services
from jobs.models import Artifact, Job, LogChunk
from jobs.queries import log_lines
from jobs.services.launch import make_token
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from jobs.states import transition


@pytest.fixture(autouse=True)
def _settings(job_settings):
    pass


def launched(owner, project, secret="s3cret", **spec):
    """A job as launch leaves it: starting, with a token (no processes needed here)."""
    job = submit_job(owner, project, command="python x.py", **spec)
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token(secret))
    return job, make_token(0, secret)


def url(job, what):
    return f"/api/v1/executor/jobs/{job.pk}/{what}"


def auth(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def post(client, job, what, body, token):
    return client.post(url(job, what), body, content_type="application/json", **auth(token))


def test_spec_serves_the_final_command(client, owner, project):
    job, token = launched(owner, project, parameters={"lr": 0.1})
    spec = client.get(url(job, "spec"), **auth(token)).json()
    assert spec["command"][1:] == ["x.py", "--lr", "0.1"]
    assert spec["env"]["GANTRY_PARAM_LR"] == "0.1"
    assert spec["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert spec["outputs_dir"] == "outputs" and spec["inputs"] == []


def test_logs_are_deduplicated_by_seq(client, owner, project):
    job, token = launched(owner, project)

    def lines(*seqs):
        return {
            "worker": 0,
            "lines": [{"seq": s, "stream": "stdout", "ts": 1.0, "text": f"l{s}"} for s in seqs],
        }

    assert post(client, job, "logs", {"worker": 0, "lines": []}, token).json() == {"last_seq": 0}
    assert post(client, job, "logs", lines(1, 2, 3), token).json() == {"last_seq": 3}
    assert post(client, job, "logs", lines(2, 3, 4, 5), token).json() == {"last_seq": 5}
    assert post(client, job, "logs", lines(1, 2), token).json() == {"last_seq": 5}
    assert post(client, job, "logs", {"worker": 0, "lines": []}, token).json() == {"last_seq": 5}
    assert [ln["text"] for ln in log_lines(job)] == ["l1", "l2", "l3", "l4", "l5"]
    assert LogChunk.objects.filter(job=job).count() == 2
    assert (
        post(client, job, "logs", {"worker": 0, "lines": [{"seq": "x"}]}, token).status_code == 400
    )


def test_metrics_are_deduplicated_by_seq(client, owner, project):
    job, token = launched(owner, project)
    batch = {
        "worker": 0,
        "metrics": [
            {"seq": 1, "step": 0, "name": "loss", "value": 1.5, "ts": 1.0},
            {"seq": 2, "step": 1, "name": "loss", "value": None, "ts": 1.0},
        ],
    }
    assert post(client, job, "metrics", batch, token).json() == {"last_seq": 2}
    assert post(client, job, "metrics", batch, token).json() == {"last_seq": 2}
    assert job.metrics.count() == 2


def test_heartbeat_answers_cancel_once_requested(client, owner, project):
    job, token = launched(owner, project)
    assert post(client, job, "heartbeat", {"worker": 0}, token).json() == {"cancel": False}
    cancel_job(owner, job)
    assert post(client, job, "heartbeat", {"worker": 0}, token).json() == {"cancel": True}


def test_artifact_upload_is_idempotent_and_checked(client, owner, project):
    job, token = launched(owner, project)
    data = b"weights" * 1000
    digest = hashlib.sha256(data).hexdigest()

    def put(body, sha):
        return client.put(
            url(job, "artifacts/ckpt/model%20v1.bin"),
            body,
            content_type="application/octet-stream",
            HTTP_X_GANTRY_WORKER="0",
            HTTP_X_GANTRY_SHA256=sha,
            **auth(token),
        )

    assert put(data, digest).status_code == 201
    assert put(data, digest).status_code == 200
    assert put(b"tampered", digest).status_code == 400
    artifact = Artifact.objects.get()
    assert artifact.path == "ckpt/model v1.bin" and artifact.size == len(data)
    assert artifact.file.read() == data
    bad = client.put(
        url(job, "artifacts/../escape"),
        data,
        content_type="application/octet-stream",
        HTTP_X_GANTRY_SHA256=digest,
        **auth(token),
    )
    assert bad.status_code in (400, 404)


def test_a_job_token_cannot_reach_another_job(client, owner, project):
    job, token = launched(owner, project)
    other, _ = launched(owner, project, secret="other")
    assert client.get(url(other, "spec"), **auth(token)).status_code == 404
    assert client.get(url(job, "spec"), **auth(token + "x")).status_code == 404
    assert client.get(url(job, "spec"), **auth("gjt_5_s3cret")).status_code == 404  # no rank 5
    assert client.get("/api/v1/executor/jobs/999999/spec", **auth(token)).status_code == 404


def test_a_job_token_reaches_nothing_but_the_executor_endpoints(client, owner, project):
    job, token = launched(owner, project)
    for path in ("/api/v1/jobs/", f"/api/v1/jobs/{job.pk}/", "/api/v1/me/", "/api/v1/projects/"):
        assert client.get(path, **auth(token)).status_code in (401, 403), path
    page = client.get(job.get_absolute_url(), **auth(token))
    assert page.status_code == 302  # to the login page


def test_users_cannot_use_the_executor_endpoints(client_for, client, owner, project):
    job, _ = launched(owner, project)
    _, key = account_services.create_api_token(actor=owner, name="cli")
    assert client.get(url(job, "spec"), **auth(key)).status_code == 404
    session = client_for(owner)
    assert session.get(url(job, "spec")).status_code == 401
    assert (
        session.post(url(job, "heartbeat"), {}, content_type="application/json").status_code == 401
    )


def test_a_token_expires_ten_minutes_after_the_job_ended(client, owner, project, settings):
    job, token = launched(owner, project)
    transition(job, "running", "test")
    transition(job, "succeeded", "test")
    assert client.get(url(job, "spec"), **auth(token)).status_code == 200
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(minutes=11))
    assert client.get(url(job, "spec"), **auth(token)).status_code == 404


def test_the_notebook_token_never_reaches_the_api(api_for, owner, project):
    job = submit_job(owner, project, kind="notebook")
    job.worker_set.update(notebook_token="jupyter-secret", port=9999)
    body = api_for(owner).get(f"/api/v1/jobs/{job.pk}/").content
    assert b"jupyter-secret" not in body and b"token_hash" not in body
