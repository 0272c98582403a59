"""The job form in a real browser (Debian's chromium under Playwright, uvicorn over the
test database): upload the digits example as a folder, pick an input dataset version,
submit, and watch the job succeed on its page. The job really runs: admission here, the
local backend's executor against uvicorn, torch training one epoch."""

import shutil
import threading

import pytest
from django.db import connection
from django.test import Client

from datasets.services.catalog import create_dataset
from jobs import tasks as job_tasks
from jobs.models import Job
from scheduling import tasks
from tests.datasets.builders import upload_files
from tests.jobs.test_browser import asgi_server, chromium  # noqa: F401 (a fixture)
from tests.jobs.test_examples import EXAMPLES, required_module

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _run_jobs(stop: threading.Event) -> None:
    """Admission and reconcile, as the worker would run them, until told to stop."""
    try:
        while not stop.is_set():
            tasks.admit_and_launch()
            job_tasks.reconcile()
            stop.wait(0.3)
    finally:
        connection.close()


def test_the_digits_example_runs_from_a_folder_uploaded_on_the_job_form(
    asgi_server,  # noqa: F811
    job_settings,
    tmp_path,
    owner,
    project,
):
    required_module("torch")
    required_module("sklearn")
    from playwright.sync_api import expect

    # The server keeps files under its GANTRY_DATA_DIR; the executors it serves read them there.
    job_settings.STORAGES = {
        **job_settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "data" / "files"},
        },
    }
    job_settings.GANTRY_URL = asgi_server
    dataset = create_dataset(owner, project, name="Digits extra", slug="digits-extra")
    version = upload_files(owner, dataset, {"notes.txt": b"staged beside the code\n"}).version
    folder = tmp_path / "upload" / "examples"
    folder.mkdir(parents=True)
    for name in ("train_digits.py", "digits_common.py"):
        shutil.copy(EXAMPLES / name, folder / name)
    (folder / ".gitignore").write_text("*.pt\n__pycache__/\n")
    (folder / "old-model.pt").write_bytes(b"never uploaded")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value

    stop = threading.Event()
    runner = threading.Thread(target=_run_jobs, args=(stop,), daemon=True)
    runner.start()
    try:
        with chromium() as browser:
            context = browser.new_context()
            context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
            page.goto(f"{asgi_server}/projects/{project.pk}/jobs/new/")
            page.set_input_files("#code-folder", str(folder))
            expect(page.locator("#code-status")).to_contain_text("is ready: 3 files", timeout=30_000)
            assert "1 ignored" in page.locator("#code-status").inner_text()
            page.fill("#id_command", "python examples/train_digits.py")
            page.fill("#id_parameters", "epochs=1")
            page.fill("#id_memory_mb", "2048")
            page.fill('input[data-filters="id_dataset_versions"]', "extra")
            page.select_option("#id_dataset_versions", str(version.pk))
            page.get_by_role("button", name="Submit job").click()
            page.wait_for_url(f"{asgi_server}/jobs/*/")
            expect(page.locator("#job-code")).to_contain_text("3 files")
            expect(page.locator("#job-code")).to_contain_text("data/digits-extra")
            expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=180_000)
            assert errors == []
            context.close()
    finally:
        stop.set()
        runner.join(30)
    job = Job.objects.get()
    assert job.state == "succeeded"
    assert sorted(job.code_snapshot.files.values_list("path", flat=True)) == [
        "examples/.gitignore",
        "examples/digits_common.py",
        "examples/train_digits.py",
    ]
    assert job.inputs[0]["dataset_version"] == version.pk
    assert job.artifacts.filter(path="model.pt").exists()


def test_a_folder_chosen_before_the_upload_script_runs_is_still_uploaded(
    asgi_server,  # noqa: F811
    job_settings,
    tmp_path,
    owner,
    project,
):
    """The folder input is usable as soon as it is drawn, before the script at the page's
    end has run: on a slow page (or a quick test) the "change" event fires with nobody
    listening. CI's journey test once lost that race and waited 60 s for an upload that
    never began. Here the script is held back until the folder is chosen."""
    from playwright.sync_api import expect

    job_settings.STORAGES = {
        **job_settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "data" / "files"},
        },
    }
    folder = tmp_path / "upload" / "code"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text("print('hello')\n")
    client = Client()
    client.force_login(owner)
    held = []
    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies(
            [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_server}]
        )
        page = context.new_page()
        page.route("**/code_upload.js", lambda route: held.append(route))
        page.goto(f"{asgi_server}/projects/{project.pk}/jobs/new/", wait_until="commit")
        page.wait_for_selector("#code-folder", state="attached")
        for _ in range(200):  # Playwright hands the held request over while it waits
            if held:
                break
            page.wait_for_timeout(50)
        assert len(held) == 1, "the upload script was not held back"
        page.set_input_files("#code-folder", str(folder))
        held[0].continue_()
        expect(page.locator("#code-status")).to_contain_text("is ready: 1 file,", timeout=30_000)
        context.close()
