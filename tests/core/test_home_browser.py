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


def test_home_follows_a_job_live_and_the_theme_follows_the_system(
    asgi_server,  # noqa: F811 - the fixture imported above
    owner,
    project,
):
    from playwright.sync_api import expect

    job = submit_job(owner, project, name="digits", command="python examples/train_digits.py")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    errors = []

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
        context.close()

    assert errors == []
