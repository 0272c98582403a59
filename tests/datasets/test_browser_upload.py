"""The upload page in a real browser (Debian's chromium under Playwright, uvicorn over the
test database, filesystem storage): pick two files, watch the bars reach 100 %, land on
the committed version. A thread here plays the django-q worker that runs the commit."""

import os
import re
import threading

import pytest
from django.db import connection
from django.test import Client

from datasets.models import DatasetVersion, UploadSession, UploadState
from datasets.services import catalog, commits
from tests.jobs.test_browser import asgi_server, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def commit_worker():
    """Runs `finish_commit` for uploads the page committed, like the task would."""
    stop = threading.Event()

    def run():
        try:
            while not stop.is_set():
                waiting = UploadSession.objects.filter(state=UploadState.COMMITTING)
                for pk in waiting.values_list("pk", flat=True):
                    commits.finish_commit(pk)
                stop.wait(0.2)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(30)


def test_upload_page_sends_two_files_and_commits(
    asgi_server,  # noqa: F811
    commit_worker,
    settings,
    tmp_path,
    owner,
    project,
):
    if os.environ.get("GANTRY_STORAGE", "filesystem") != "filesystem":
        pytest.skip("the browser test drives the filesystem backend's chunked endpoint")
    from playwright.sync_api import expect

    # The server keeps files under its GANTRY_DATA_DIR; the commit worker here must too.
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "data" / "files"},
        },
    }
    dataset = catalog.create_dataset(owner, project, name="Pets", slug="pets")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    files = {"cats.csv": b"name,age\ntom,3\n" * 2000, "notes.txt": b"hello\n"}

    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
        page.goto(f"{asgi_server}/datasets/{dataset.pk}/upload/")
        page.set_input_files(
            '[data-role="pick-files"]',
            files=[
                {"name": name, "mimeType": "application/octet-stream", "buffer": data}
                for name, data in files.items()
            ],
        )
        expect(page.locator('[data-role="files"] tr')).to_have_count(2)
        page.locator('[data-role="message"]').fill("two files from the browser")
        page.locator('[data-role="start"]').click()
        expect(page.locator('[data-role="overall"]')).to_have_text("100%")
        expect(page).to_have_url(re.compile(r"/dataset-versions/\d+/$"))
        for name in files:
            expect(page.get_by_text(name).first).to_be_visible()
        version_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        context.close()
    assert not errors, errors

    version = DatasetVersion.objects.get(pk=version_id)
    assert version.dataset_id == dataset.pk and version.file_count == 2
    assert {f.path: f.size for f in version.files.all()} == {n: len(d) for n, d in files.items()}
    assert version.message == "two files from the browser"


def test_a_chosen_folder_is_the_versions_top_level_as_push_lays_it_out(
    asgi_server,  # noqa: F811
    commit_worker,
    settings,
    tmp_path,
    owner,
    project,
):
    """Choosing `digits_csv/` gives train.csv and sub/notes.txt, not digits_csv/train.csv:
    the layout `gantry datasets push digits_csv` makes (tests/cli/test_datasets_push.py)."""
    if os.environ.get("GANTRY_STORAGE", "filesystem") != "filesystem":
        pytest.skip("the browser test drives the filesystem backend's chunked endpoint")
    from playwright.sync_api import expect

    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "data" / "files"},
        },
    }
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    folder = tmp_path / "pick" / "digits_csv"
    (folder / "sub").mkdir(parents=True)
    (folder / "train.csv").write_bytes(b"a,b\n1,2\n")
    (folder / "sub" / "notes.txt").write_bytes(b"hello\n")
    client = Client()
    client.force_login(owner)

    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_server}])
        page = context.new_page()
        page.goto(f"{asgi_server}/datasets/{dataset.pk}/upload/")
        page.set_input_files('[data-role="pick-folder"]', str(folder))
        expect(page.locator('[data-role="files"] tr')).to_have_count(2)
        expect(page.locator('[data-role="files"]')).to_contain_text("sub/notes.txt")
        page.locator('[data-role="start"]').click()
        expect(page).to_have_url(re.compile(r"/dataset-versions/\d+/$"))
        context.close()

    version = dataset.versions.get()
    assert sorted(version.files.values_list("path", flat=True)) == ["sub/notes.txt", "train.csv"]


def test_files_chosen_before_the_upload_script_runs_are_still_listed(
    asgi_server,  # noqa: F811
    tmp_path,
    owner,
    project,
):
    """The file inputs work as soon as they are drawn, before the script at the page's end
    has run: on a slow page their "change" event fires with nobody listening. Here the
    script is held back until the files are chosen; they are listed once it runs."""
    from playwright.sync_api import expect

    dataset = catalog.create_dataset(owner, project, name="Slow", slug="slow")
    client = Client()
    client.force_login(owner)
    held = []
    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_server}])
        page = context.new_page()
        page.route("**/datasets/upload.js", lambda route: held.append(route))
        page.goto(f"{asgi_server}/datasets/{dataset.pk}/upload/", wait_until="commit")
        page.wait_for_selector('[data-role="pick-files"]', state="attached")
        for _ in range(200):  # Playwright hands the held request over while it waits
            if held:
                break
            page.wait_for_timeout(50)
        assert len(held) == 1, "the upload script was not held back"
        page.set_input_files(
            '[data-role="pick-files"]',
            files=[{"name": "early.txt", "mimeType": "text/plain", "buffer": b"early\n"}],
        )
        held[0].continue_()
        expect(page.locator('[data-role="files"] tr')).to_have_count(1)
        expect(page.locator('[data-role="files"]')).to_contain_text("early.txt")
        context.close()
