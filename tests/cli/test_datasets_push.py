"""`gantry datasets push` as a user runs it (a subprocess against the live server; a thread
does what django-q's worker does with the commit): a folder is the version's top level,
`--remove` and `--exact` drop files, an unchanged folder makes no version (issue 42)."""

import json
import shutil
import threading
import time

import pytest

from datasets.models import UploadSession, UploadState
from datasets.services import catalog, commits
from tests.datasets.conftest import fs_storage  # noqa: F401 - a fixture used here

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def committer():
    stop = threading.Event()

    def work():
        while not stop.is_set():
            for s in UploadSession.objects.filter(state=UploadState.COMMITTING):
                commits.finish_commit(s.pk)
            time.sleep(0.05)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def versions_of(dataset) -> list[dict[str, str]]:
    return [
        dict(v.files.values_list("path", "blob_id")) for v in dataset.versions.order_by("number")
    ]


def test_push_lays_a_folder_out_as_its_contents_and_exact_remove_and_unchanged_agree(
    live_gantry, fs_storage, committer, owner, project, tmp_path  # noqa: F811
):
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    folder = tmp_path / "digits_csv"
    (folder / "extra").mkdir(parents=True)
    (folder / "train.csv").write_text("a,b\n1,2\n")
    (folder / "test.csv").write_text("a,b\n3,4\n")
    (folder / "extra" / "notes.txt").write_text("hello\n")

    first = live_gantry("datasets", "push", str(folder), "-d", "digits")
    assert first.returncode == 0, first.stderr
    assert set(versions_of(dataset)[-1]) == {"train.csv", "test.csv", "extra/notes.txt"}

    unchanged = live_gantry("datasets", "push", str(folder), "-d", "digits")
    assert unchanged.returncode == 0, unchanged.stderr
    assert "Nothing changed: version 1 already holds exactly these files." in unchanged.stdout
    assert dataset.versions.count() == 1 and UploadSession.objects.count() == 1

    removed = live_gantry("datasets", "push", str(folder), "-d", "digits", "--remove", "extra")
    assert removed.returncode == 0, removed.stderr
    assert set(versions_of(dataset)[-1]) == {"train.csv", "test.csv"}

    (folder / "test.csv").unlink()
    shutil.rmtree(folder / "extra")
    added = live_gantry("datasets", "push", str(folder), "-d", "digits")  # adds: test.csv stays
    assert "Nothing changed: version 2 already holds exactly these files." in added.stdout
    exact = live_gantry("datasets", "push", str(folder), "-d", "digits", "--exact", "--json")
    assert exact.returncode == 0, exact.stderr
    assert json.loads(exact.stdout)["state"] == "committed"
    assert versions_of(dataset)[-1] == {"train.csv": versions_of(dataset)[0]["train.csv"]}
    assert dataset.versions.count() == 3

    missing = live_gantry("datasets", "push", str(folder), "-d", "digits", "--remove", "nope.csv")
    assert missing.returncode == 6
    assert "'nope.csv' is neither a file nor a folder of version 3" in missing.stderr
    assert dataset.versions.count() == 3
