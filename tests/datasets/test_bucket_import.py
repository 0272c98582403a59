"""A dataset version copied from a prefix of the configured bucket (real Ceph, no mocks)."""

import hashlib
import io

import pytest
from django.core.files.storage import default_storage

from datasets import storage
from datasets.models import Blob, BucketImport, UploadState, VersionSource, blob_key
from datasets.services import bucket_imports
from projects import services as project_services
from projects.models import ProjectRole


def put(key: str, data: bytes) -> None:
    storage.s3_client().put_object(Bucket=storage.bucket(), Key=key, Body=data)


def start(api, dataset, prefix, **extra):
    return api.post(
        f"/api/v1/datasets/{dataset.pk}/import-prefix/", {"prefix": prefix, **extra}, format="json"
    )


def test_feature_off_by_default_with_a_clear_message(fs_storage, dataset, owner, api_for, settings):
    settings.GANTRY_DATASET_IMPORT_PREFIXES = ""
    response = start(api_for(owner), dataset, "incoming/")
    assert response.status_code == 400
    assert "turned off" in str(response.json())
    assert not BucketImport.objects.exists()


@pytest.mark.services
@pytest.mark.usefixtures("s3_storage")
def test_import_prefix_copies_server_side_and_dedupes(dataset, owner, api_for, settings):
    settings.GANTRY_DATASET_IMPORT_PREFIXES = "incoming/, elsewhere"
    known = b"already stored"
    storage.store_blob(hashlib.sha256(known).hexdigest(), io.BytesIO(known))
    Blob.objects.create(sha256=hashlib.sha256(known).hexdigest(), size=len(known))
    files = {
        "a/one.txt": b"one\n",
        "a/same.txt": b"one\n",  # same content: one blob
        "b/known.bin": known,  # its blob exists: not copied again
        "big.bin": bytes(range(256)) * 40_000,
    }
    for rel, data in files.items():
        put(f"incoming/set1/{rel}", data)
    put("incoming/set1/folder/", b"")  # a folder marker is not a file
    put("incoming/set10/other.txt", b"not mine")  # a sibling prefix, not under set1/
    put("private/secret.txt", b"secret")

    api = api_for(owner)
    response = start(api, dataset, "incoming/set1")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["state"] == UploadState.OPEN and body["prefix"] == "incoming/set1/"

    imp = bucket_imports.import_bucket_prefix(body["id"])  # what the worker runs
    assert imp.state == UploadState.COMMITTED, imp.error
    version = imp.version
    assert version.source == VersionSource.BUCKET
    assert version.source_detail["prefix"] == "incoming/set1/"
    got = {f.path: f.blob_id for f in version.files.all()}
    assert got == {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
    assert version.total_size == sum(len(d) for d in files.values())
    for data in files.values():
        with default_storage.open(blob_key(hashlib.sha256(data).hexdigest()), "rb") as fh:
            assert fh.read() == data
    # progress: every file hashed once; only the two new blobs were copied
    assert (imp.files_total, imp.files_done) == (4, 4)
    assert imp.bytes_total == imp.bytes_done == version.total_size
    assert imp.bytes_copied == len(files["a/one.txt"]) + len(files["big.bin"])
    status = api.get(f"/api/v1/datasets/{dataset.pk}/bucket-imports/{imp.pk}/").json()
    assert status["state"] == "committed" and status["version"] == version.pk
    assert status["files_done"] == 4
    # the source objects are untouched
    assert storage.s3_client().get_object(Bucket=storage.bucket(), Key="private/secret.txt")


@pytest.mark.services
@pytest.mark.usefixtures("s3_storage")
def test_bad_prefixes_and_roles_are_refused(dataset, owner, member, project, api_for, settings):
    settings.GANTRY_DATASET_IMPORT_PREFIXES = "incoming/"
    api = api_for(owner)
    for prefix, words in [
        ("private/", "outside the allowed"),
        ("incomingx/", "outside the allowed"),
        ("incoming/../private/", "'..'"),
        ("incoming/\x07x/", "control"),
        ("", "prefix"),
    ]:
        response = start(api, dataset, prefix)
        assert response.status_code == 400, (prefix, response.content)
        assert words in str(response.json()), (prefix, response.json())
    project_services.add_project_member(
        actor=owner, project=project, user=member, role=ProjectRole.DEVELOPER
    )
    response = start(api_for(member), dataset, "incoming/x/")
    assert response.status_code == 403
    assert not BucketImport.objects.exists()


@pytest.mark.services
@pytest.mark.usefixtures("s3_storage")
def test_unsafe_or_empty_prefix_fails_cleanly(dataset, owner, settings):
    settings.GANTRY_DATASET_IMPORT_PREFIXES = "incoming/"
    imp = bucket_imports.start_bucket_import(owner, dataset, "incoming/empty/")
    imp = bucket_imports.import_bucket_prefix(imp.pk)
    assert imp.state == UploadState.FAILED and "No objects" in imp.error
    put("incoming/bad/ok.txt", b"ok")
    put("incoming/bad/a/../../escape.txt", b"x")
    imp = bucket_imports.import_bucket_prefix(
        bucket_imports.start_bucket_import(owner, dataset, "incoming/bad").pk
    )
    assert imp.state == UploadState.FAILED, imp.error
    assert "escape.txt" in imp.error
    assert imp.version is None and not dataset.versions.exists()
    assert imp.bytes_copied == 0
