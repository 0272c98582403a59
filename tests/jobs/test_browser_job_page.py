"""The job page stays true without a reload (issue 27 item 4), in a real browser.

A real job: submitted here, admitted and launched by a real `manage.py qcluster`, run by a
real executor that reports to uvicorn. Chromium (Playwright) opens the job page while the
job is still queued and watches it move queued -> running -> succeeded: the queue note goes,
placement appears, the timeline gets every step (admitted and starting included), and the
outputs and "Register as model" arrive, all with one page load. Then the register form
(issue 27 item 5) shows the output file with its size, and the description typed there is on
the version's page.

The ORM is used only outside the browser block (Playwright's sync API runs an event loop
in this thread, where Django refuses synchronous queries).
"""

import pytest
from django.test import Client

from jobs.services.submit import submit_job
from modelhub.models import ModelVersion
from tests.faults.conftest import web  # noqa: F401 - a fixture used here
from tests.faults.procs import QCluster, script
from tests.jobs.test_browser import chromium

pytestmark = pytest.mark.slow


def test_the_job_page_follows_a_real_job_without_a_reload(web, owner, project, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    go = tmp_path / "go"
    command = script(
        tmp_path,
        "gated.py",
        f"""
        import os, time
        print("waiting for the test", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
        with open(os.path.join(os.environ["GANTRY_OUTPUTS_DIR"], "model.pt"), "wb") as f:
            f.write(b"\\x80\\x02" + b"w" * 2998)  # a pickle's opening bytes
        print("done", flush=True)
        """,
    )
    # No worker runs yet: the submit's kick waits on the queue, the job stays queued.
    job = submit_job(owner, project, name="gated", command=f"python {command}")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    cluster = QCluster(tmp_path, web.url)

    try:
        with chromium() as browser:
            context = browser.new_context()
            context.add_cookies([{"name": "sessionid", "value": session, "url": web.url}])
            page = context.new_page()
            loads = []
            page.on("request", lambda r: r.resource_type == "document" and loads.append(r.url))
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{web.url}/jobs/{job.pk}/")
            page.wait_for_selector("#job-page[data-live='live']")
            expect(page.locator("#job-state")).to_have_text("Queued")
            expect(page.locator("#job-queue")).to_be_visible()
            expect(page.locator("#job-placement")).to_have_text("not placed yet")
            expect(page.locator("#job-register")).to_have_count(0)

            cluster.start()  # the worker admits and launches it
            expect(page.locator("#job-state")).to_have_text("Running", timeout=90_000)
            expect(page.locator("#job-queue")).to_have_count(0)
            expect(page.locator("#job-placement")).to_contain_text("worker 0 on", timeout=30_000)
            timeline = page.locator("#job-timeline")
            for step in ("queued → admitted", "admitted → starting", "starting → running"):
                expect(timeline).to_contain_text(step, timeout=30_000)
            expect(page.locator("#job-outputs")).to_contain_text("No output files yet")
            # Cancel asks first, naming what is lost; keeping it running changes nothing.
            page.click("#job-cancel")
            dialog = page.locator("#job-cancel-dialog")
            expect(dialog).to_be_visible()
            expect(dialog).to_contain_text("are lost")
            dialog.get_by_role("button", name="Keep it running").click()
            expect(dialog).to_be_hidden()
            expect(page.locator("#job-state")).to_have_text("Running")

            go.touch()
            expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=60_000)
            expect(timeline).to_contain_text("running → succeeded")
            expect(page.locator("#job-outputs")).to_contain_text("model.pt", timeout=30_000)
            expect(page.locator("#job-register")).to_be_visible(timeout=30_000)
            expect(page.locator("#job-cancel")).to_have_count(0)
            assert loads == [f"{web.url}/jobs/{job.pk}/"], "the page was reloaded"
            # Each step once (the socket's copy and the refreshed list never both).
            for step in ("queued → admitted", "admitted → starting", "starting → running"):
                assert timeline.inner_text().count(step) == 1

            page.click("#job-register")
            files = page.locator("#register-files")
            expect(files.locator(".form-check")).to_have_count(1)
            expect(files.locator(".form-check")).to_contain_text("model.pt")
            expect(files.locator(".form-check")).to_contain_text("2.9 KiB")
            files.get_by_label("model.pt").check()
            page.fill("#id_model_name", "gated model")
            page.fill("#id_description", "trained behind a gate")
            page.get_by_role("button", name="Register version").click()
            expect(page.locator("#version-description")).to_have_text("trained behind a gate")
            assert errors == []
            context.close()
    finally:
        cluster.stop()
    assert ModelVersion.objects.get(model__name="gated model").description == "trained behind a gate"
