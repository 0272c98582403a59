"""The web server restarted while a browser follows a job's log.

A real executor prints numbered lines through uvicorn; chromium (Playwright) watches the job
page; the test restarts uvicorn mid-job. The page says it is reconnecting, comes back live,
resumes after its last line, and ends with every line exactly once.

The ORM is used only outside the browser block: Playwright's sync API runs an event loop in
this thread, where Django refuses synchronous queries.
"""

import pytest
from django.test import Client

from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.faults.procs import script
from tests.jobs.conftest import wait_for
from tests.jobs.test_browser import chromium

pytestmark = pytest.mark.slow

LINES = 60


def test_browser_resumes_after_a_web_server_restart(web, owner, project, tmp_path):
    from playwright.sync_api import expect

    go = tmp_path / "go"
    command = script(
        tmp_path,
        "slow_count.py",
        f"""
        import os, time
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
        for i in range(1, {LINES} + 1):
            print(f"line {{i}}", flush=True)
            time.sleep(0.1)
        """,
    )
    job = submit_job(owner, project, name="watch", command=f"python {command}")
    wait_for(job, "running")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value

    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": web.url}])
        page = context.new_page()
        page.goto(f"{web.url}/jobs/{job.pk}/")
        page.wait_for_selector("#job-page[data-live='live']")
        lines = page.locator("#log-lines .log-line")
        printed = page.locator("#log-lines .log-line.stream-stdout")
        go.touch()
        expect(printed.nth(9)).to_have_text("line 10")

        web.stop()
        page.wait_for_selector("#job-page[data-live='reconnecting…']")
        web.start()
        page.wait_for_selector("#job-page[data-live='live']", timeout=30_000)

        expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=60_000)
        expect(printed.last).to_have_text(f"line {LINES}", timeout=30_000)
        texts = printed.all_text_contents()
        seqs = [int(s) for s in lines.evaluate_all("els => els.map(e => e.dataset.seq)")]
        context.close()

    assert web.starts == 2
    stored = log_lines(job, limit=100_000)
    assert [ln["seq"] for ln in stored] == seqs  # every stored line, once, in order
    assert texts == [f"line {i}" for i in range(1, LINES + 1)]
