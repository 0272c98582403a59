"""Unpack archive (issue 27 item 9): after the upload, the dataset page shows "Unpacking" and
then the new version by itself, without a reload. Chromium (Playwright) against uvicorn; the
unpacking task runs here, in a thread, when the test lets it (as the worker would run it)."""

import io
import os
import re
import threading
import zipfile

import pytest
from django.db import connection
from django.test import Client

from datasets.models import ArchiveImport, UploadState
from datasets.services import archives, catalog
from tests.jobs.test_browser import asgi_server, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_unpacked_version_appears_without_a_reload(asgi_server, settings, tmp_path, owner, project):  # noqa: F811
    if os.environ.get("GANTRY_STORAGE", "filesystem") != "filesystem":
        pytest.skip("the unpacking thread reads the server's files from its filesystem storage")
    from playwright.sync_api import expect

    # The server keeps files under its GANTRY_DATA_DIR; the unpacking here must read them.
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
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("cats.csv", b"name,age\ntom,3\n")
        archive.writestr("dogs/rex.txt", b"woof\n")

    go, stop = threading.Event(), threading.Event()

    def worker():
        try:
            go.wait(60)
            while not stop.is_set():
                for pk in ArchiveImport.objects.filter(state=UploadState.OPEN).values_list("pk", flat=True):
                    archives.extract_archive(pk)
                stop.wait(0.2)
        finally:
            connection.close()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        with chromium() as browser:
            context = browser.new_context()
            context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
            page = context.new_page()
            errors, loads = [], []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
            page.goto(f"{asgi_server}/datasets/{dataset.pk}/")
            page.get_by_role("link", name="Unpack archive").click()
            page.set_input_files(
                "#id_archive",
                files=[{"name": "pets.zip", "mimeType": "application/zip", "buffer": buffer.getvalue()}],
            )
            page.get_by_role("button", name="Upload and unpack").click()
            expect(page).to_have_url(re.compile(rf"/datasets/{dataset.pk}/$"))
            versions = page.locator("#dataset-versions")
            expect(versions).to_contain_text("Unpacking")
            expect(versions).to_contain_text("No versions yet")

            page.on("request", lambda r: r.resource_type == "document" and loads.append(r.url))
            go.set()  # the worker unpacks it now
            expect(versions.get_by_role("link", name="v1")).to_be_visible(timeout=30_000)
            expect(versions).not_to_contain_text("Unpacking")
            expect(versions).to_contain_text("2")  # files
            assert loads == [], "the page was reloaded"
            assert errors == []
            context.close()
    finally:
        go.set()
        stop.set()
        thread.join(30)
