"""`gantry datasets push/pull` with S3 storage (the real single-node Ceph of tests/ceph.py):
parts go to the RADOS Gateway through the presigned URLs the server signs, and Gantry's own
part endpoint is never called; pull brings the same bytes back."""

import hashlib
import json
import threading
import time

import pytest
from django.core.files.storage import default_storage
from typer.testing import CliRunner

from datasets.models import UploadSession, UploadState
from datasets.services import catalog, commits, uploads
from tests.datasets.conftest import ceph, s3_storage  # noqa: F401 - fixtures used here

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_push_sends_parts_straight_to_the_object_store(
    s3_storage, live_server, owner, project, write_token, tmp_path, monkeypatch  # noqa: F811
):
    from gantry_cli.main import app

    dataset = catalog.create_dataset(owner, project, name="Scans", slug="scans")
    folder = tmp_path / "scans"
    folder.mkdir()
    (folder / "big.bin").write_bytes(bytes(range(256)) * (24 * 1024))  # 6 MiB: two parts
    (folder / "small.txt").write_text("small")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    env = {"GANTRY_URL": live_server.url, "GANTRY_TOKEN": write_token}
    stop = threading.Event()

    def committer():
        while not stop.is_set():
            for s in UploadSession.objects.filter(state=UploadState.COMMITTING):
                commits.finish_commit(s.pk)
            time.sleep(0.05)

    def refuse(*args, **kwargs):
        raise AssertionError("a part went through Gantry's own endpoint")

    monkeypatch.setattr(uploads, "receive_part", refuse)  # a tripwire, not a stand-in
    thread = threading.Thread(target=committer, daemon=True)
    thread.start()
    try:
        pushed = CliRunner().invoke(
            app, ["datasets", "push", str(folder), "-d", "scans", "--json"], env=env
        )
    finally:
        stop.set()
        thread.join()

    assert pushed.exit_code == 0, pushed.output
    status = json.loads(pushed.stdout)
    assert status["backend"] == "s3" and status["parts_sent"] == 3
    version = dataset.versions.get(pk=status["version"])
    assert version.files.count() == 2
    for f in version.files.select_related("blob"):
        assert default_storage.size(f.blob.key) == f.size  # in the bucket

    pulled = CliRunner().invoke(
        app, ["datasets", "pull", "scans", str(tmp_path / "copy"), "--json"], env=env
    )
    assert pulled.exit_code == 0, pulled.output
    for name in ("big.bin", "small.txt"):
        copy = (tmp_path / "copy" / name).read_bytes()
        assert hashlib.sha256(copy).digest() == hashlib.sha256((folder / name).read_bytes()).digest()

