"""Datasets on a real Ceph RADOS Gateway (tests/ceph.py): presigned multipart uploads
straight to the gateway, commit, download, abort and cleanup, and the gateway going away
in the middle. The client below speaks the same protocol as the upload page."""

import hashlib
import os
import urllib.error
import urllib.request

import pytest

from datasets import storage
from datasets.models import DatasetVersion, UploadState, blob_key
from datasets.services import archives, cleanup, commits, inputs, uploads

pytestmark = [pytest.mark.services, pytest.mark.usefixtures("s3_storage")]
MIB = 1024 * 1024


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def http(method: str, url: str, data: bytes | None = None):
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, dict(resp.headers), resp.read()


class PageClient:
    """What upload.js does, in Python: start, sign, PUT to the gateway, complete-part, commit."""

    def __init__(self, api):
        self.api = api

    def start(self, dataset, files: dict[str, bytes], **extra):
        body = {
            "dataset": dataset.pk,
            "files": [{"path": p, "size": len(d)} for p, d in files.items()],
            **extra,
        }
        response = self.api.post("/api/v1/uploads/", body, format="json")
        assert response.status_code == 201, response.content
        return response.json()

    def send(self, session, files: dict[str, bytes], only=None, corrupt=None):
        for f in session["files"]:
            data = files[f["path"]]
            for n in range(1, f["part_count"] + 1):
                if n in f["parts"] or (only is not None and (f["path"], n) not in only):
                    continue
                chunk = data[(n - 1) * session["part_size"] : n * session["part_size"]]
                urls = self.api.post(
                    f"/api/v1/uploads/{session['id']}/sign/",
                    {"file": f["id"], "numbers": [n]},
                    format="json",
                ).json()["urls"]
                sent = chunk if corrupt != (f["path"], n) else b"!" + chunk[1:]
                status, headers, _ = http("PUT", urls[str(n)], sent)
                assert status == 200
                done = self.api.post(
                    f"/api/v1/uploads/{session['id']}/complete-part/",
                    {
                        "file": f["id"],
                        "number": n,
                        "sha256": sha(chunk),
                        "etag": headers.get("ETag", ""),
                    },
                    format="json",
                )
                assert done.status_code == 200, done.content

    def status(self, session):
        return self.api.get(f"/api/v1/uploads/{session['id']}/").json()

    def commit(self, session):
        response = self.api.post(f"/api/v1/uploads/{session['id']}/commit/")
        assert response.status_code == 202, response.content
        return commits.finish_commit(session["id"])  # what the worker runs


@pytest.fixture
def page(owner, api_for):
    return PageClient(api_for(owner))


def test_presigned_multipart_upload_commit_and_download(page, dataset, owner, api_for):
    files = {"big.bin": os.urandom(11 * MIB), "small.txt": b"small", "empty": b""}
    session = page.start(dataset, files)
    assert session["backend"] == "s3"
    assert [f["part_count"] for f in session["files"]] == [3, 0, 1]
    page.send(session, files)
    result = page.commit(session)
    assert result.state == UploadState.COMMITTED, result.error
    version = result.version
    assert dict(version.files.values_list("path", "blob_id")) == {
        p: sha(d) for p, d in files.items()
    }
    # Stored once, content-addressed, staging gone, no multipart upload left behind.
    client, bucket = storage.s3_client(), storage.bucket()
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert keys == {blob_key(sha(d)) for d in files.values()}
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    # Download: Gantry redirects to a presigned GET; the bytes come from the gateway.
    big = version.files.get(path="big.bin")
    response = api_for(owner).get(f"/api/v1/dataset-files/{big.pk}/download/")
    assert response.status_code == 302
    assert http("GET", response["Location"])[2] == files["big.bin"]


def test_resume_sends_only_missing_parts(page, dataset):
    files = {"a.bin": os.urandom(6 * MIB)}
    session = page.start(dataset, files)
    page.send(session, files, only={("a.bin", 2)})
    status = page.status(session)
    assert status["files"][0]["parts"] == [2] and not status["files"][0]["complete"]
    page.send(status, files)  # "after a reload"
    assert page.commit(session).state == UploadState.COMMITTED


def test_corrupted_part_fails_the_commit_cleanly_and_the_file_can_be_sent_again(page, dataset):
    files = {"a.bin": os.urandom(6 * MIB)}
    session = page.start(dataset, files)
    page.send(session, files, corrupt=("a.bin", 1))
    result = page.commit(session)
    assert result.state == UploadState.OPEN and "checksum mismatch" in result.error
    assert not DatasetVersion.objects.exists()
    status = page.status(session)
    assert status["files"][0]["parts"] == []  # start this file over
    page.send(status, files)
    assert page.commit(session).state == UploadState.COMMITTED


def test_abort_and_abandoned_cleanup_leave_nothing_in_the_bucket(page, dataset, owner):
    from datetime import timedelta

    from django.utils import timezone

    from datasets.models import UploadSession

    files = {"a.bin": os.urandom(6 * MIB)}
    first = page.start(dataset, files)
    page.send(first, files, only={("a.bin", 1)})
    uploads.abort_upload(owner, UploadSession.objects.get(pk=first["id"]))
    second = page.start(dataset, files)
    page.send(second, files, only={("a.bin", 1)})
    UploadSession.objects.filter(pk=second["id"]).update(
        updated_at=timezone.now() - timedelta(days=3)
    )
    assert cleanup.cleanup_abandoned_uploads() == 1
    client, bucket = storage.s3_client(), storage.bucket()
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert not client.list_objects_v2(Bucket=bucket).get("Contents")


def test_gateway_going_away_mid_upload_fails_cleanly_and_resumes(page, dataset, s3_storage):
    files = {"a.bin": os.urandom(11 * MIB)}
    session = page.start(dataset, files)
    page.send(session, files, only={("a.bin", 1)})
    s3_storage.stop_gateway()
    try:
        with pytest.raises(urllib.error.URLError):
            page.send(session, files, only={("a.bin", 2)})  # the presigned PUT cannot connect
        # Gantry's own calls that need the gateway answer 503 with a message, never 500.
        refused = page.api.post(
            f"/api/v1/uploads/{session['id']}/complete-part/",
            {"file": session["files"][0]["id"], "number": 2, "sha256": "0" * 64},
            format="json",
        )
        assert refused.status_code == 503, refused.content
        assert "cannot be reached" in refused.json()["detail"]
    finally:
        s3_storage.start_gateway()
    page.send(page.status(session), files)
    # The gateway goes away during the commit: the upload reopens, nothing is committed.
    page.api.post(f"/api/v1/uploads/{session['id']}/commit/")
    s3_storage.stop_gateway()
    try:
        result = commits.finish_commit(session["id"])
        assert result.state == UploadState.OPEN and "could not be reached" in result.error
        assert not DatasetVersion.objects.exists()
    finally:
        s3_storage.start_gateway()
    assert page.commit(session).state == UploadState.COMMITTED
    assert DatasetVersion.objects.get().files.get().sha256 == sha(files["a.bin"])


def test_jobs_get_presigned_urls_for_their_inputs(page, dataset, owner, project):
    from jobs.services.submit import submit_job

    files = {"x.txt": b"payload"}
    session = page.start(dataset, files)
    page.send(session, files)
    page.commit(session)
    job = submit_job(owner, project, command="true", inputs=[{"dataset": "digits"}])
    (entry,) = inputs.inputs_for_executor(job, file_url=str)
    (f,) = entry["files"]
    assert f["url"].startswith(storage.s3_client().meta.endpoint_url)
    assert http("GET", f["url"])[2] == b"payload"


def test_archive_and_zip_download_on_s3(dataset, owner, client):
    import io
    import zipfile

    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a/b.txt", b"bee")
    archive = archives.start_archive_import(
        owner, dataset, SimpleUploadedFile("x.zip", buf.getvalue())
    )
    archive = archives.extract_archive(archive.pk)
    assert archive.state == UploadState.COMMITTED, archive.error
    client.force_login(owner)
    response = client.get(reverse("datasets:version_download", args=[archive.version.pk]))
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as zf:
        assert zf.read("a/b.txt") == b"bee"
