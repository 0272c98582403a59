"""Datasets on the filesystem backend: uploads, versions, archives, browsing, jobs."""

import gzip
import hashlib
import io
import os
import tarfile
import zipfile
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import timezone

from datasets.models import (
    ArchiveImport,
    Blob,
    DatasetFile,
    DatasetVersion,
    StorageQuota,
    UploadPart,
    UploadSession,
    UploadState,
)
from datasets.services import archives, catalog, cleanup, commits, uploads, versions
from tests.datasets.builders import send_parts, upload_files

pytestmark = pytest.mark.usefixtures("fs_storage")
MIB = 1024 * 1024


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def staged(fs_storage, session) -> list[str]:
    root = fs_storage / session.staging_prefix
    return [str(p) for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_upload_commits_a_version_with_server_checked_sha256(owner, dataset):
    big = os.urandom(5 * MIB + 123)  # two parts
    session = upload_files(owner, dataset, {"a/big.bin": big, "a/small.txt": b"hello"})
    assert session.state == UploadState.COMMITTED
    version = session.version
    assert (version.number, version.file_count, version.total_size) == (1, 2, len(big) + 5)
    files = {f.path: f for f in version.files.all()}
    assert files["a/big.bin"].sha256 == sha(big)
    assert files["a/small.txt"].sha256 == sha(b"hello")
    assert session.reserved_bytes == 0


def test_new_version_keeps_unchanged_files_without_uploading_them_again(owner, dataset):
    v1 = upload_files(
        owner, dataset, {"keep.txt": b"same", "old.txt": b"old", "x.txt": b"1"}
    ).version
    blobs_before = Blob.objects.count()
    session = upload_files(owner, dataset, {"x.txt": b"2", "new.txt": b"new"}, remove=["old.txt"])
    v2 = session.version
    assert v2.parent == v1 and v2.number == 2
    assert dict(v2.files.values_list("path", "blob_id")) == {
        "keep.txt": sha(b"same"),
        "x.txt": sha(b"2"),
        "new.txt": sha(b"new"),
    }
    # Only the two new contents were uploaded and stored; keep.txt was never sent.
    assert session.files.count() == 2
    assert Blob.objects.count() == blobs_before + 2
    # v1 is untouched.
    assert set(v1.files.values_list("path", flat=True)) == {"keep.txt", "old.txt", "x.txt"}


def test_identical_content_is_stored_once(owner, dataset, fs_storage):
    upload_files(owner, dataset, {"a.txt": b"twin", "b.txt": b"twin"})
    assert Blob.objects.filter(sha256=sha(b"twin")).count() == 1
    assert len(list((fs_storage / "blobs").rglob("*.*"))) == 0  # keys are bare hashes
    assert (fs_storage / "blobs" / sha(b"twin")[:2] / sha(b"twin")).read_bytes() == b"twin"


def test_known_sha256_in_the_tenant_is_linked_without_upload(owner, dataset):
    upload_files(owner, dataset, {"a.txt": b"content"})
    session = uploads.start_upload(
        owner, dataset, files=[{"path": "renamed.txt", "size": 7, "sha256": sha(b"content")}]
    )
    assert session.files.get().part_count == 0 and session.reserved_bytes == 0
    uploads.commit_upload(owner, session)
    version = commits.finish_commit(session.pk).version
    assert version.files.get(path="renamed.txt").sha256 == sha(b"content")


def test_sha256_from_another_tenant_is_not_linked(owner, dataset, outsider, other_project):
    theirs = catalog.create_dataset(outsider, other_project, name="Secret")
    upload_files(outsider, theirs, {"s.txt": b"secret"})
    session = uploads.start_upload(
        owner, dataset, files=[{"path": "guess.txt", "size": 6, "sha256": sha(b"secret")}]
    )
    assert session.files.get().part_count == 1  # must upload the bytes like anyone else


def test_corrupted_part_is_refused_and_not_kept(owner, dataset, fs_storage):
    session = uploads.start_upload(owner, dataset, files=[{"path": "a.bin", "size": 4}])
    f = session.files.get()
    with pytest.raises(ValidationError, match="checksum mismatch"):
        uploads.receive_part(owner, session, f, 1, io.BytesIO(b"abcX"), sha(b"abcd"))
    assert not UploadPart.objects.exists() and staged(fs_storage, session) == []
    with pytest.raises(ValidationError, match="expected 4 bytes"):
        uploads.receive_part(owner, session, f, 1, io.BytesIO(b"abcde"), sha(b"abcde"))


def test_commit_waits_for_every_part_and_the_upload_resumes(owner, dataset):
    data = {"a.bin": os.urandom(5 * MIB + 1), "b.txt": b"b"}
    session = uploads.start_upload(
        owner, dataset, files=[{"path": p, "size": len(d)} for p, d in data.items()]
    )
    send_parts(owner, session, data, only={("a.bin", 1)})
    with pytest.raises(ValidationError, match="Not everything has arrived"):
        uploads.commit_upload(owner, session)
    assert not DatasetVersion.objects.exists()
    status = uploads.upload_status(session)
    assert {f["path"]: f["parts"] for f in status["files"]} == {"a.bin": [1], "b.txt": []}
    # "After a reload": send only what the server lacks.
    send_parts(owner, session, data, only={("a.bin", 2), ("b.txt", 1)})
    uploads.commit_upload(owner, session)
    assert commits.finish_commit(session.pk).state == UploadState.COMMITTED


def test_quota_is_enforced_before_an_upload_starts(owner, dataset, tenant):
    StorageQuota.objects.create(tenant=tenant, bytes=10)
    with pytest.raises(ValidationError, match="left"):
        uploads.start_upload(owner, dataset, files=[{"path": "a", "size": 11}])
    assert not UploadSession.objects.exists()
    ok = uploads.start_upload(owner, dataset, files=[{"path": "a", "size": 6}])
    # The open upload reserves its bytes: a second one cannot take them too.
    with pytest.raises(ValidationError):
        uploads.start_upload(owner, dataset, files=[{"path": "b", "size": 6}])
    uploads.abort_upload(owner, ok)
    uploads.start_upload(owner, dataset, files=[{"path": "b", "size": 6}])


@pytest.mark.parametrize(
    "path",
    ["../etc/passwd", "a/../../b", "/abs", "C:/x", "a\\b", "a\x00b", "a\nb", "a\x1bb", "a//b",
     "./a", "x" * 256, "/".join(["d" * 200] * 6), ".gantry/x", ""],
)  # fmt: skip
def test_unsafe_file_names_are_refused(owner, dataset, path):
    with pytest.raises(ValidationError):
        uploads.start_upload(owner, dataset, files=[{"path": path, "size": 1}])
    assert not UploadSession.objects.exists()


def test_a_path_cannot_be_both_file_and_folder(owner, dataset):
    with pytest.raises(ValidationError, match="both a file and a folder"):
        uploads.start_upload(
            owner, dataset, files=[{"path": "a", "size": 1}, {"path": "a/b", "size": 1}]
        )


def test_abort_deletes_the_parts(owner, dataset, fs_storage):
    data = {"a.txt": b"abc"}
    session = uploads.start_upload(owner, dataset, files=[{"path": "a.txt", "size": 3}])
    send_parts(owner, session, data)
    assert staged(fs_storage, session)
    uploads.abort_upload(owner, session)
    session.refresh_from_db()
    assert session.state == UploadState.ABORTED and session.reserved_bytes == 0
    assert staged(fs_storage, session) == [] and not UploadPart.objects.exists()
    with pytest.raises(ValidationError):
        uploads.commit_upload(owner, session)


def test_abandoned_uploads_are_aborted_by_the_cleanup_task(owner, dataset, fs_storage):
    from datasets import tasks

    session = uploads.start_upload(owner, dataset, files=[{"path": "a.txt", "size": 3}])
    send_parts(owner, session, {"a.txt": b"abc"})
    fresh = uploads.start_upload(owner, dataset, files=[{"path": "b.txt", "size": 1}])
    UploadSession.objects.filter(pk=session.pk).update(
        updated_at=timezone.now() - timedelta(days=2)
    )
    assert tasks.cleanup_uploads() == 1
    session.refresh_from_db()
    fresh.refresh_from_db()
    assert session.state == UploadState.ABORTED and staged(fs_storage, session) == []
    assert fresh.state == UploadState.OPEN


def test_garbage_collection_deletes_only_unreferenced_blobs(owner, dataset, fs_storage):
    upload_files(owner, dataset, {"a.txt": b"keep"})
    other = catalog.create_dataset(owner, dataset.project, name="Gone")
    upload_files(owner, other, {"b.txt": b"drop", "c.txt": b"keep"})
    catalog.delete_dataset(owner, other)
    assert (
        cleanup.collect_garbage(grace=timedelta(0), now=timezone.now() + timedelta(seconds=1)) == 1
    )
    assert set(Blob.objects.values_list("sha256", flat=True)) == {sha(b"keep")}
    assert not (fs_storage / "blobs" / sha(b"drop")[:2] / sha(b"drop")).exists()


def test_member_cannot_upload_and_outsider_cannot_see(member, outsider, dataset, api_for):
    with pytest.raises(PermissionDenied):
        uploads.start_upload(member, dataset, files=[{"path": "a", "size": 1}])
    response = api_for(outsider).post(
        "/api/v1/uploads/",
        {"dataset": dataset.pk, "files": [{"path": "a", "size": 1}]},
        format="json",
    )
    assert response.status_code == 404


# --- the protocol over HTTP -------------------------------------------------------------


def test_browser_protocol_over_the_api(owner, dataset, client):
    client.force_login(owner)
    data = os.urandom(5 * MIB + 7)
    response = client.post(
        "/api/v1/uploads/",
        {"dataset": dataset.pk, "files": [{"path": "d/x.bin", "size": len(data)}]},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    session = response.json()
    (f,) = session["files"]
    assert session["backend"] == "filesystem" and f["part_count"] == 2
    size = session["part_size"]
    part = data[:size]
    bad = client.put(
        f"/api/v1/uploads/{session['id']}/part/?file={f['id']}&number=1",
        part[:-1] + b"!",
        content_type="application/octet-stream",
        HTTP_X_PART_SHA256=sha(part),
    )
    assert bad.status_code == 400 and "checksum mismatch" in bad.json()["non_field_errors"][0]
    for n in (1, 2):
        chunk = data[(n - 1) * size : n * size]
        ok = client.put(
            f"/api/v1/uploads/{session['id']}/part/?file={f['id']}&number={n}",
            chunk,
            content_type="application/octet-stream",
            HTTP_X_PART_SHA256=sha(chunk),
        )
        assert ok.status_code == 200, ok.content
    assert client.get(f"/api/v1/uploads/{session['id']}/").json()["files"][0]["parts"] == [1, 2]
    assert client.post(f"/api/v1/uploads/{session['id']}/commit/").status_code == 202
    version = commits.finish_commit(session["id"]).version
    file = version.files.get()
    download = client.get(reverse("datasets:file_download", args=[file.pk]))
    assert b"".join(download.streaming_content) == data
    listing = client.get(f"/api/v1/dataset-files/?version={version.pk}").json()["results"]
    assert listing == [
        {
            "id": file.pk,
            "version": version.pk,
            "path": "d/x.bin",
            "size": len(data),
            "sha256": sha(data),
        }
    ]


def test_whole_version_downloads_as_a_streamed_zip(owner, dataset, client):
    files = {"a.txt": b"alpha", "dir/b.csv": b"x,y\n1,2\n"}
    version = upload_files(owner, dataset, files).version
    client.force_login(owner)
    response = client.get(reverse("datasets:version_download", args=[version.pk]))
    assert response.streaming
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as zf:
        assert {n: zf.read(n) for n in zf.namelist()} == files


def test_previews_show_csv_heads_and_text(owner, dataset, client):
    version = upload_files(
        owner, dataset, {"t.csv": b"name,age\nada,36\n", "r.md": b"# hi"}
    ).version
    client.force_login(owner)
    csv_page = client.get(
        reverse("datasets:file_detail", args=[version.files.get(path="t.csv").pk])
    )
    assert b"<th>name</th>" in csv_page.content and b"<td>ada</td>" in csv_page.content
    md_page = client.get(reverse("datasets:file_detail", args=[version.files.get(path="r.md").pk]))
    assert b"# hi" in md_page.content


def test_dataset_list_query_count_does_not_grow(
    owner, project, client, django_assert_max_num_queries
):
    for i in range(12):
        catalog.create_dataset(owner, project, name=f"D{i}", tags=["x"])
    client.force_login(owner)
    with django_assert_max_num_queries(12):
        assert client.get(reverse("datasets:dataset_list")).status_code == 200
    with django_assert_max_num_queries(12):
        assert client.get("/api/v1/datasets/").status_code == 200


# --- archives ---------------------------------------------------------------------------


def _zip(entries: dict[str, bytes], link: str | None = None) -> bytes:
    """A zip archive with fixed entry times (see _tar)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(zipfile.ZipInfo(name), data, zipfile.ZIP_DEFLATED)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


def _tar(entries: dict[str, bytes], links=(), gz=True) -> bytes:
    """A tar archive, gzipped with a fixed header time: these bytes are collected as
    test parameters by every xdist worker, and the collections must be equal."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target, kind in links:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = target
            tf.addfile(info)
    return gzip.compress(buf.getvalue(), mtime=0) if gz else buf.getvalue()


def _import(owner, dataset, name, payload):
    from django.core.files.uploadedfile import SimpleUploadedFile

    archive = archives.start_archive_import(owner, dataset, SimpleUploadedFile(name, payload))
    return archives.extract_archive(archive.pk)


@pytest.mark.parametrize(
    "name,payload",
    [
        ("d.zip", _zip({"a/x.txt": b"x", "b.txt": b"bb"})),
        ("d.tar.gz", _tar({"./a/x.txt": b"x", "b.txt": b"bb"})),
        ("d.tar", _tar({"a/x.txt": b"x", "b.txt": b"bb"}, gz=False)),
    ],
    ids=["zip", "tar.gz", "tar"],
)
def test_archives_unpack_into_a_version(owner, dataset, name, payload):
    archive = _import(owner, dataset, name, payload)
    assert archive.state == UploadState.COMMITTED, archive.error
    assert dict(archive.version.files.values_list("path", "size")) == {"a/x.txt": 1, "b.txt": 2}


@pytest.mark.parametrize(
    "name,payload,reason",
    [
        ("t.zip", _zip({"../escape.txt": b"x"}), ".."),
        ("t.zip", _zip({"/etc/cron.d/x": b"x"}), "absolute"),
        ("t.zip", _zip({"ok.txt": b"x"}, link="evil"), "link"),
        ("t.tar.gz", _tar({"ok": b"x"}, links=[("l", "/etc/passwd", tarfile.SYMTYPE)]), "link"),
        ("t.tar.gz", _tar({"ok": b"x"}, links=[("h", "../../x", tarfile.LNKTYPE)]), "link"),
        ("t.tar.gz", _tar({"a/../../x": b"x"}), ".."),
        ("bomb.zip", _zip({"zeros": b"\0" * (20 * MIB)}), "archive bomb"),
        ("t.zip", _zip({"a\x01b": b"x"}), "control"),
        ("t.zip", b"not an archive at all", "Not a zip or tar"),
    ],
    ids=[
        "zip-parent",
        "zip-absolute",
        "zip-symlink",
        "tar-symlink",
        "tar-hardlink",
        "tar-parent",
        "zip-bomb",
        "zip-control-char",
        "not-an-archive",
    ],
)
def test_malicious_archives_are_refused_and_nothing_is_committed(
    owner, dataset, fs_storage, name, payload, reason
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    # At upload, while the uploader waits for the answer...
    with pytest.raises(ValidationError) as refused:
        archives.start_archive_import(owner, dataset, SimpleUploadedFile(name, payload))
    assert reason in " ".join(refused.value.messages)
    assert not ArchiveImport.objects.exists()
    assert not [p for p in fs_storage.rglob("*") if p.is_file() and "archives" in p.parts]
    # ...and again by the unpacking task, which trusts nothing it is handed.
    archive = archives.extract_archive(_staged(owner, dataset, name, payload).pk)
    assert archive.state == UploadState.FAILED
    assert reason in archive.error
    assert not DatasetVersion.objects.exists()


def _staged(owner, dataset, name, payload):
    """An archive staged as start_archive_import stages one, without its checks."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    key = default_storage.save("archives/staged/archive", ContentFile(payload))
    return ArchiveImport.objects.create(
        dataset=dataset, file_name=name, staging_key=key, size=len(payload), created_by=owner
    )


def test_archive_file_count_limit(owner, dataset, settings):
    settings.GANTRY_ARCHIVE_MAX_FILES = 3
    payload = _zip({f"f{i}": b"x" for i in range(4)})
    with pytest.raises(ValidationError, match="More than 3 files"):
        _import(owner, dataset, "many.zip", payload)
    archive = archives.extract_archive(_staged(owner, dataset, "many.zip", payload).pk)
    assert archive.state == UploadState.FAILED and "More than 3 files" in archive.error
    assert not ArchiveImport.objects.filter(state=UploadState.COMMITTED).exists()


# --- jobs ---------------------------------------------------------------------------------


def test_jobs_name_dataset_versions_and_read_them_with_their_token(owner, dataset, project, client):
    from jobs.models import Job
    from jobs.services.launch import job_spec_for_executor, make_token
    from jobs.services.submit import submit_job

    v1 = upload_files(owner, dataset, {"train/a.txt": b"one"}).version
    other = catalog.create_dataset(owner, project, name="Other")
    not_an_input = upload_files(owner, other, {"z": b"z"}).version.files.get()
    job = submit_job(
        owner,
        project,
        command="python -c pass",
        inputs=[{"dataset": "digits", "version": "latest"}],
    )
    upload_files(owner, dataset, {"train/a.txt": b"two"})  # v2: the job still reads v1
    assert job.inputs == [
        {"dataset_version": v1.pk, "dataset": "digits", "version": 1, "mount": "data/digits"}
    ]
    secret = "s3cret"
    Job.objects.filter(pk=job.pk).update(token_hash=Job.hash_token(secret))
    token = make_token(0, secret)
    job.refresh_from_db()
    (entry,) = job_spec_for_executor(job, 0)["inputs"]
    (f,) = entry["files"]
    assert entry["mount"] == "data/digits" and f["path"] == "train/a.txt"
    assert f["sha256"] == sha(b"one") and f["size"] == 3
    got = client.get(f["url"], HTTP_AUTHORIZATION=f"Bearer {token}")
    assert got.status_code == 200 and b"".join(got.streaming_content) == b"one"
    assert client.get(f["url"]).status_code == 401
    stranger = reverse("executor-dataset-file", args=[job.pk, not_an_input.pk])
    assert client.get(stranger, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404


def test_job_inputs_must_be_visible_dataset_versions(owner, project, outsider, other_project):
    from jobs.services.submit import submit_job

    theirs = catalog.create_dataset(outsider, other_project, name="Theirs")
    version = upload_files(outsider, theirs, {"a": b"a"}).version
    with pytest.raises(ValidationError, match="No such dataset version"):
        submit_job(
            owner, project, command="true", inputs=[{"dataset_version": version.pk}]
        )


def test_job_outputs_become_a_new_version(owner, dataset, project):
    from jobs.services.outputs import store_artifact
    from jobs.services.submit import submit_job

    job = submit_job(owner, project, command="python -c pass")
    for path, data in (("model.pt", b"weights"), ("metrics.json", b"{}")):
        store_artifact(job, 0, path, io.BytesIO(data), sha(data))
    version = versions.save_job_outputs(owner, job, dataset)
    assert version.source == "job_output" and version.source_detail == {"job": job.pk}
    assert dict(version.files.values_list("path", "blob_id")) == {
        "model.pt": sha(b"weights"),
        "metrics.json": sha(b"{}"),
    }


def test_versions_are_immutable_through_the_api(owner, dataset, api_for):
    version = upload_files(owner, dataset, {"a": b"a"}).version
    api = api_for(owner)
    # No update or delete route exists (the permission class refuses unknown actions first).
    assert api.patch(f"/api/v1/dataset-versions/{version.pk}/", {"number": 9}).status_code in (
        403,
        405,
    )
    assert api.delete(f"/api/v1/dataset-files/{version.files.get().pk}/").status_code in (403, 405)
    assert DatasetFile.objects.get().version.number == 1
