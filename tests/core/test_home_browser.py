"""The home page in a real browser (Debian's chromium under Playwright, against uvicorn):
a job's state changes on the page without a reload, dark mode follows the system's
colour scheme, and the browser's size formatter says what the server's says.

The server and browser fixtures are tests/jobs/test_browser.py's. The ORM runs in a
thread of its own while the browser is open: Playwright's sync API runs an event loop in
the test's thread, where Django refuses synchronous queries.
"""

import threading

import pytest
from django.db import connection
from django.test import Client

from core.formatting import format_size
from jobs.services.ingestion import ingest_metrics
from jobs.services.submit import submit_job
from jobs.states import transition
from tests.jobs.test_browser import asgi_server, chromium  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def in_thread(work):
    """Run ORM work outside Playwright's event loop (and close that thread's connection)."""
    failure = []

    def body():
        try:
            work()
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(30)
    if failure:
        raise failure[0]


def collect_errors(page, errors):
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))


def run_notebook(owner, project):
    notebook = submit_job(owner, project, name="explore", kind="notebook")
    for state in ("admitted", "starting", "running"):
        transition(notebook, state, "test")
    return notebook


def test_home_follows_a_job_live_and_the_theme_follows_the_system(
    asgi_server,  # noqa: F811 - the fixture imported above
    owner,
    project,
    tmp_path,
):
    from playwright.sync_api import expect

    job = submit_job(owner, project, name="digits", command="python examples/train_digits.py")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    errors = []
    artefacts = tmp_path / "screenshots"  # kept by pytest's tmp_path for a look after a run
    artefacts.mkdir()

    with chromium() as browser:
        # Dark: the system says dark, the page is dark, before anything is clicked.
        context = browser.new_context(color_scheme="dark")
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        collect_errors(page, errors)
        page.goto(asgi_server + "/")
        expect(page.locator("html")).to_have_attribute("data-bs-theme", "dark")
        expect(page.locator("body")).to_have_css("background-color", "rgb(15, 21, 34)")

        # Live: queued -> running -> succeeded, with no reload.
        row = page.locator(f"#home-active-jobs tr[data-job='{job.pk}']")
        expect(row.locator("[data-state]")).to_have_text("Queued")

        def start():
            transition(job, "admitted", "test")
            transition(job, "starting", "test")
            transition(job, "running", "running")

        in_thread(start)
        expect(row.locator("[data-state]")).to_have_text("Running")

        def finish():
            ingest_metrics(job, 0, [{"seq": 1, "name": "accuracy", "step": 1, "value": 0.98765432}])
            transition(job, "succeeded", "exit code 0")

        in_thread(finish)
        result = page.locator(f"#home-results tr[data-job='{job.pk}']")
        expect(result.locator("[data-state]")).to_have_text("Succeeded")
        expect(result).to_contain_text("accuracy 0.9877")
        expect(row).to_have_count(0)
        expect(page.locator("#home-active-jobs")).to_contain_text("Nothing of yours is running")

        # A notebook left running: Open, and Stop asks first, naming what is lost. The
        # panel's refresh waits while the dialog is open (a swap would close it).
        notebook = []
        in_thread(lambda: notebook.append(run_notebook(owner, project)))
        item = page.locator(f"#home-notebooks [data-job='{notebook[0].pk}']")
        expect(item.get_by_role("link", name="Open")).to_be_visible()
        item.get_by_role("button", name="Stop").click()
        dialog = page.locator(f"#stop-notebook-{notebook[0].pk}")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("unsaved notebook changes and running kernels are lost")
        in_thread(lambda: transition(notebook[0], "succeeded", "stopped elsewhere"))
        page.wait_for_timeout(4500)  # longer than the panel's 3 s: it would have swapped by now
        expect(dialog).to_be_visible()
        expect(item).to_have_count(1)
        dialog.get_by_role("button", name="Keep it running").click()
        expect(item).to_have_count(0)  # the refresh resumes once the dialog is closed
        page.screenshot(path=artefacts / "home-dark.png", full_page=True)

        # One size rule: the browser's formatter (the upload page's) says what the server says.
        sizes = [0, 1023, 1024, 1280, 19_100, 1024 * 1024 - 20, 5 * 1024**3 + 123_456]
        assert page.evaluate("(v) => v.map((n) => window.gantryFormat.size(n))", sizes) == [
            format_size(n) for n in sizes
        ]
        context.close()

        # Light: the same page under a light system stays light.
        context = browser.new_context(color_scheme="light")
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        collect_errors(page, errors)
        page.goto(asgi_server + "/")
        expect(page.locator("html")).to_have_attribute("data-bs-theme", "light")
        expect(page.locator("body")).to_have_css("background-color", "rgb(245, 247, 250)")
        # And follows the system when it changes while the page is open.
        page.emulate_media(color_scheme="dark")
        expect(page.locator("html")).to_have_attribute("data-bs-theme", "dark")
        page.emulate_media(color_scheme="light")
        expect(page.locator("html")).to_have_attribute("data-bs-theme", "light")
        page.screenshot(path=artefacts / "home-light.png", full_page=True)
        context.close()

    assert errors == []
