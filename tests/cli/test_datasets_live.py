"""`gantry datasets push` killed halfway and run again: it resumes the same upload session,
sends only the parts the server lacks, and the version commits complete; `pull` brings
the same bytes back.

The server is the test's live server (filesystem storage, 5 MiB parts); a thread does
what django-q's worker does with a commit (tests/datasets/test_cli.py does the same).
"""

import hashlib
import json
import signal
import subprocess
import threading
import time

import pytest

from datasets.models import UploadPart, UploadSession, UploadState
from datasets.services import catalog, commits
from tests.cli.conftest import cli_env, gantry_command
from tests.datasets.conftest import fs_storage  # noqa: F401 - a fixture used here

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
FILES = 4
FILE_MB = 15  # 3 parts each
PARTS = FILES * 3


@pytest.fixture
def committer(transactional_db):
    stop = threading.Event()

    def work():
        while not stop.is_set():
            for s in UploadSession.objects.filter(state=UploadState.COMMITTING):
                commits.finish_commit(s.pk)
            time.sleep(0.1)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def make_folder(tmp_path):
    folder = tmp_path / "images"
    (folder / "train").mkdir(parents=True)
    for i in range(FILES):
        block = hashlib.sha256(str(i).encode()).digest() * (MiB // 32)
        (folder / "train" / f"shard-{i}.bin").write_bytes(block * FILE_MB)
    return folder


def test_push_resumes_after_being_killed_halfway_and_pull_brings_it_back(
    fs_storage, committer, live_server, owner, project, write_token, tmp_path  # noqa: F811
):
    dataset = catalog.create_dataset(owner, project, name="Images", slug="images")
    folder = make_folder(tmp_path)
    env = cli_env(live_server.url, write_token, tmp_path)
    args = ["datasets", "push", str(folder), "--dataset", "images", "--parallel", "1", "--json"]

    first = subprocess.Popen(gantry_command(*args), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while UploadPart.objects.count() < 3:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "no parts arrived"
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    time.sleep(0.5)  # a part in flight when the client died lands or not: either is fine
    session = UploadSession.objects.get()
    assert session.state == UploadState.OPEN
    kept = set(UploadPart.objects.values_list("pk", flat=True))
    assert 3 <= len(kept) < PARTS

    second = subprocess.run(gantry_command(*args), env=env, capture_output=True, text=True,
                            timeout=180)  # fmt: skip

    assert second.returncode == 0, second.stderr
    status = json.loads(second.stdout)
    assert status["id"] == session.pk and status["resumed"] is True
    assert status["parts_sent"] == PARTS - len(kept)  # the first parts were not sent again
    version = dataset.versions.get(pk=status["version"])
    local = {
        f"train/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (folder / "train").iterdir()
    }
    assert dict(version.files.values_list("path", "blob_id")) == local

    pulled = subprocess.run(
        gantry_command("datasets", "pull", "images", str(tmp_path / "copy"), "--json"),
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["downloaded"] == FILES
    for path, digest in local.items():
        assert hashlib.sha256((tmp_path / "copy" / path).read_bytes()).hexdigest() == digest
