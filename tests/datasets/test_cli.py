"""The CLI helper against a live server (filesystem backend), with a worker doing the commit."""

import threading
import time

import pytest

from accounts import services as account_services
from datasets import cli
from datasets.models import UploadSession, UploadState
from datasets.services import catalog, commits


@pytest.mark.django_db(transaction=True)
def test_cli_uploads_a_folder_and_links_known_files(
    fs_storage, live_server, owner, project, tmp_path
):
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    _, token = account_services.create_api_token(actor=owner, name="cli", scope="write")
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"alpha")
    (folder / "sub" / "b.bin").write_bytes(b"\x01" * (6 * 1024 * 1024))
    stop = threading.Event()

    def worker():  # what django-q does with the commit task
        while not stop.is_set():
            for s in UploadSession.objects.filter(state=UploadState.COMMITTING):
                commits.finish_commit(s.pk)
            time.sleep(0.1)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        api = cli.Api(live_server.url, token)
        first = cli.upload(api, dataset.pk, cli.collect([str(folder)]), quiet=True)
        (folder / "c.txt").write_bytes(b"alpha")  # same content, new name: linked, not sent
        second = cli.upload(api, dataset.pk, cli.collect([str(folder)]), quiet=True)
    finally:
        stop.set()
        thread.join()
    v1 = dataset.versions.get(pk=first["version"])
    v2 = dataset.versions.get(pk=second["version"])
    assert set(v1.files.values_list("path", flat=True)) == {"a.txt", "sub/b.bin"}
    assert set(v2.files.values_list("path", flat=True)) == {"a.txt", "c.txt", "sub/b.bin"}
    assert all(f["part_count"] == 0 for f in second["files"])  # nothing was uploaded again
