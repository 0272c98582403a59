"""The snapshot API as the CLI and the job form speak it (contract items 1-4)."""

import hashlib

import pytest
from django.core.files.storage import default_storage

from datasets.models import Blob, blob_key
from snapshots.models import CodeSnapshot, SnapshotFile
from tests.snapshots.builders import make_snapshot, manifest

pytestmark = pytest.mark.django_db

TREE = {"train.py": b"print('hello')\n", "lib/util.py": b"X = 1\n", "run.sh": b"#!/bin/sh\n"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _create(api, project, files=TREE, git=None):
    return api.post(
        "/api/v1/snapshots/",
        {"project": project.pk, "files": manifest(files), "git": git},
        format="json",
    )


def _put(api, snapshot_id, data: bytes, sha: str | None = None):
    return api.put(
        f"/api/v1/snapshots/{snapshot_id}/blobs/{sha or _sha(data)}",
        data,
        content_type="application/octet-stream",
    )


def test_it_uploads_a_tree_once_and_a_second_identical_upload_misses_nothing(
    api_for, owner, project
):
    api = api_for(owner)
    git = {"commit": "a" * 40, "dirty": True, "branch": "main"}
    first = _create(api, project, git=git)
    assert first.status_code == 201, first.content
    body = first.json()
    assert body["state"] == "pending"
    assert sorted(body["missing"]) == sorted(_sha(d) for d in TREE.values())
    assert body["file_count"] == 3 and body["size"] == sum(map(len, TREE.values()))
    assert body["url"] == f"/code/{body['id']}/"

    refused = api.post(f"/api/v1/snapshots/{body['id']}/finalize")
    assert refused.status_code == 400
    assert len(refused.json()["missing"]) == 3 and "not arrived" in refused.json()["detail"]

    for data in TREE.values():
        assert _put(api, body["id"], data).status_code == 204
    assert _put(api, body["id"], TREE["train.py"]).status_code == 204  # idempotent
    done = api.post(f"/api/v1/snapshots/{body['id']}/finalize")
    assert done.status_code == 200 and done.json()["state"] == "ready"

    again = _create(api, project)
    assert again.status_code == 201
    assert again.json()["missing"] == [] and again.json()["state"] == "ready"

    detail = api.get(f"/api/v1/snapshots/{body['id']}").json()
    assert detail["git"] == git
    assert [f["path"] for f in detail["files"]] == ["lib/util.py", "run.sh", "train.py"]
    listed = api.get(f"/api/v1/snapshots/?project={project.pk}").json()["results"]
    assert {row["id"] for row in listed} == {body["id"], again.json()["id"]}


def test_a_blob_with_the_wrong_bytes_is_refused_and_nothing_changes(api_for, owner, project):
    api = api_for(owner)
    tree = {"train.py": b"print('only in this test')\n"}  # storage outlives each test's rows
    body = _create(api, project, tree).json()
    sha = _sha(tree["train.py"])
    wrong = b"print('ONLY IN THIS TEST')\n"  # same size, other bytes
    response = _put(api, body["id"], wrong, sha=sha)
    assert response.status_code == 400
    assert "sha256" in response.json()["detail"]
    assert not Blob.objects.filter(pk=sha).exists()
    assert not default_storage.exists(blob_key(sha))
    assert SnapshotFile.objects.filter(snapshot_id=body["id"], blob__isnull=False).count() == 0
    longer = _put(api, body["id"], tree["train.py"] + b"#", sha=sha)
    assert longer.status_code == 400 and "bytes" in longer.json()["detail"]
    unknown = _put(api, body["id"], b"other")
    assert unknown.status_code == 400 and "No file" in unknown.json()["detail"]
    assert _put(api, body["id"], b"x", sha="not-a-hash").status_code == 400
    assert CodeSnapshot.objects.get(pk=body["id"]).state == "pending"


def test_another_tenants_identical_file_is_still_missing_and_their_snapshot_is_404(
    api_for, owner, outsider, project, other_project
):
    mine = make_snapshot(owner, project, TREE)
    theirs = _create(api_for(outsider), other_project)
    assert theirs.status_code == 201
    assert sorted(theirs.json()["missing"]) == sorted(_sha(d) for d in TREE.values())
    api = api_for(outsider)
    assert api.get(f"/api/v1/snapshots/{mine.pk}").status_code == 404
    assert _put(api, mine.pk, TREE["train.py"]).status_code == 404
    assert api.post(f"/api/v1/snapshots/{mine.pk}/finalize").status_code == 404
    assert _create(api, project).status_code == 404  # not their project
    assert mine.pk not in {r["id"] for r in api.get("/api/v1/snapshots/").json()["results"]}
    assert api_for(outsider).get(f"/code/{mine.pk}/").status_code in (302, 404)


def test_a_viewer_reads_but_may_not_upload(api_for, owner, member, project):
    snapshot = make_snapshot(owner, project, TREE)
    api = api_for(member)  # a tenant member: a viewer of the tenant's project
    assert api.get(f"/api/v1/snapshots/{snapshot.pk}").status_code == 200
    assert _create(api, project).status_code == 403
    assert CodeSnapshot.objects.count() == 1


def test_the_size_limit_names_the_biggest_files(api_for, owner, project, settings):
    settings.GANTRY_SNAPSHOT_MAX_MB = 1
    files = [
        {"path": "weights.bin", "size": 3 * 1024 * 1024, "sha256": "a" * 64},
        {"path": "data/big.csv", "size": 2 * 1024 * 1024, "sha256": "b" * 64},
        {"path": "train.py", "size": 100, "sha256": "c" * 64},
    ]
    response = api_for(owner).post(
        "/api/v1/snapshots/", {"project": project.pk, "files": files}, format="json"
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "the biggest files: weights.bin (3.0 MiB), data/big.csv (2.0 MiB)" in detail.lower() or (
        "The biggest files: weights.bin (3.0 MiB), data/big.csv (2.0 MiB)" in detail
    )
    assert CodeSnapshot.objects.count() == 0
    settings.GANTRY_SNAPSHOT_MAX_FILES = 2
    many = api_for(owner).post(
        "/api/v1/snapshots/", {"project": project.pk, "files": files}, format="json"
    )
    assert many.status_code == 400 and "3 files" in many.json()["detail"]


@pytest.mark.parametrize("path", ["../evil.py", "/etc/passwd", ".gantry/spec", "a//b", "a\\b"])
def test_paths_that_would_escape_are_refused(api_for, owner, project, path):
    files = [{"path": path, "size": 1, "sha256": "a" * 64}]
    response = api_for(owner).post(
        "/api/v1/snapshots/", {"project": project.pk, "files": files}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["detail"]
    assert CodeSnapshot.objects.count() == 0


def test_the_snapshot_page_browses_folders_and_shows_a_files_text(client_for, owner, project):
    snapshot = make_snapshot(owner, project, TREE, git={"commit": "b" * 40, "dirty": False, "branch": "dev"})
    client = client_for(owner)
    root = client.get(f"/code/{snapshot.pk}/").content.decode()
    assert "lib/" in root and "train.py" in root and "bbbbbbbbbb" in root
    folder = client.get(f"/code/{snapshot.pk}/", {"path": "lib"}).content.decode()
    assert "util.py" in folder and "train.py" not in folder
    text = client.get(f"/code/{snapshot.pk}/", {"path": "train.py"}).content.decode()
    assert "print(&#x27;hello&#x27;)" in text
    download = client.get(f"/code/{snapshot.pk}/download/", {"path": "lib/util.py"})
    assert b"".join(download.streaming_content) == TREE["lib/util.py"]
    assert client.get(f"/code/{snapshot.pk}/", {"path": "nope"}).status_code == 404
    zipped = client.get(f"/code/{snapshot.pk}/download/")
    assert zipped.status_code == 200 and zipped["Content-Type"] == "application/zip"


def _tar(members: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_many_small_files_go_in_one_tar_and_one_bad_member_refuses_the_batch(
    api_for, owner, project
):
    api = api_for(owner)
    tree = {f"src/m{i}.py": f"X = {i}  # batch test\n".encode() for i in range(5)}
    body = _create(api, project, tree).json()
    url = f"/api/v1/snapshots/{body['id']}/blobs"
    members = {_sha(data): data for data in tree.values()}
    bad = dict(members)
    first = next(iter(bad))
    bad[first] = bad[first].upper()  # same size, other bytes
    refused = api.post(url, _tar(bad), content_type="application/x-tar")
    assert refused.status_code == 400 and "nothing of this batch" in refused.json()["detail"]
    assert not Blob.objects.filter(pk__in=list(members)).exists()
    assert not any(default_storage.exists(blob_key(sha)) for sha in members)
    assert api.post(url, b"not a tar", content_type="application/x-tar").status_code == 400
    done = api.post(url, _tar(members), content_type="application/x-tar")
    assert done.status_code == 200, done.content
    assert sorted(done.json()["received"]) == sorted(members) and done.json()["missing"] == []
    assert api.post(f"/api/v1/snapshots/{body['id']}/finalize").json()["state"] == "ready"
