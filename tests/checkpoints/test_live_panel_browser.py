"""The job page's Checkpoints panel follows the job without a reload (issue 42 item 1), in
Chromium against uvicorn: the executor's own requests (begin, upload, commit, with the
job's token) save a checkpoint while the page watches, and the panel lists it.

The ORM is used only before the browser starts (Playwright's sync API runs an event loop
in this thread, where Django refuses synchronous queries).
"""

import hashlib

import httpx
import pytest
from django.test import Client

from jobs.models import Job
from jobs.services.launch import make_token
from jobs.services.submit import submit_job
from jobs.states import transition
from tests.jobs.test_browser import SECRET, FakeExecutor, asgi_server, chromium  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def save_checkpoint(base_url: str, job_id: int, name: str, step: int, data: bytes) -> None:
    """What `executor.checkpoint()` sends: announce, upload each file, commit."""
    digest = hashlib.sha256(data).hexdigest()
    url = f"{base_url}/api/v1/executor/jobs/{job_id}/checkpoints"
    headers = {"Authorization": f"Bearer {make_token(0, SECRET)}"}
    with httpx.Client(headers=headers, timeout=10) as http:
        files = [{"path": "model.pt", "size": len(data), "sha256": digest}]
        body = {"name": name, "step": step, "metrics": {"loss": 0.25}, "files": files}
        begun = http.post(url, json=body)
        begun.raise_for_status()
        pk = begun.json()["id"]
        http.put(
            f"{url}/{pk}/files/model.pt", content=data, headers={"X-Gantry-Sha256": digest}
        ).raise_for_status()
        http.post(f"{url}/{pk}/commit").raise_for_status()


def test_a_committed_checkpoint_appears_on_the_open_job_page(asgi_server, owner, project):  # noqa: F811
    from playwright.sync_api import expect

    job = submit_job(owner, project, name="digits", command="python train.py")
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token(SECRET))
    transition(job, "running", "running")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    executor = FakeExecutor(asgi_server, job.pk)

    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        loads, errors = [], []
        page.on("request", lambda r: r.resource_type == "document" and loads.append(r.url))
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
        page.goto(f"{asgi_server}/jobs/{job.pk}/")
        page.wait_for_selector("#job-page[data-live='live']")
        panel = page.locator("#job-checkpoints")
        expect(panel).to_contain_text("No checkpoints yet")

        save_checkpoint(asgi_server, job.pk, "epoch-3", 3, b"weights" * 100)
        executor.log("checkpoint epoch-3 saved")
        expect(page.locator("#log-lines .log-line").last).to_have_text("checkpoint epoch-3 saved")
        expect(panel).to_contain_text("epoch-3")
        expect(panel).to_contain_text("loss=0.25")
        expect(panel).not_to_contain_text("No checkpoints yet")
        expect(panel.get_by_role("button", name="New job from it")).to_have_count(1)

        # One committed while the socket is down: the page refetches the panel on reconnect.
        page.dispatch_event("#job-page", "live:drop")
        page.wait_for_selector("#job-page[data-live='reconnecting…']")
        save_checkpoint(asgi_server, job.pk, "epoch-6", 6, b"better" * 100)
        page.wait_for_selector("#job-page[data-live='live']")
        expect(panel.locator("tbody tr")).to_have_count(2)
        expect(panel.locator("tbody tr").first).to_contain_text("epoch-6")

        assert loads == [f"{asgi_server}/jobs/{job.pk}/"], "the page was reloaded"
        assert errors == []
        context.close()
