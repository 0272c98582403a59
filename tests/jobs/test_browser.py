"""End to end in a real browser: Debian's chromium, driven by Playwright, against uvicorn.

Django's live_server speaks WSGI only, so the test starts `uvicorn config.asgi:application`
on a free port over the test database (a file, or the PostgreSQL test database in
the second pass, where REDIS_URL puts the channel layer on Redis). The executor's
side is its HTTP protocol: batches of log lines and metrics posted with the job's
token to the executor endpoints, the same requests `python -m executor` sends.

The ORM is used only before the browser starts: Playwright's sync API runs an event
loop in this thread, where Django refuses synchronous queries.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from core.ports import free_port
from jobs.models import Job
from jobs.services.launch import make_token
from jobs.services.submit import submit_job
from jobs.states import transition
from tests.conftest import service_required

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
SECRET = "s3cret"


def _database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}?timeout=20"


@contextlib.contextmanager
def serving_asgi(tmp_path, **extra_env: str):
    """uvicorn serving config.asgi over the test database, as production runs it
    (platform/k8s/asgi.yaml); yields (base URL, its process), stopped afterwards."""
    port = free_port()
    env = {
        **os.environ,
        "GANTRY_ENV": "development",
        "DEBUG": "true",  # static files straight from the source folders
        "DATABASE_URL": _database_url(),
        "GANTRY_DATA_DIR": str(tmp_path / "data"),
        "SECRET_KEY": settings.SECRET_KEY,  # the test's session cookie must be valid there
        "LOG_LEVEL": "WARNING",
        **extra_env,
    }
    log_path = tmp_path / "uvicorn.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
        + ["--port", str(port), "--lifespan", "on", "--no-access-log"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/accounts/login/", timeout=1)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "uvicorn did not start: " + log_path.read_text(errors="replace")[-3000:]
                    ) from None
                time.sleep(0.2)
        yield url, server
    finally:
        with contextlib.suppress(ProcessLookupError):  # a test may have stopped it
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture
def asgi_server(tmp_path):
    """uvicorn serving config.asgi over the test database; yields its base URL."""
    with serving_asgi(tmp_path) as (url, _):
        yield url


@contextlib.contextmanager
def chromium():
    """Debian's chromium under Playwright (never `playwright install`: no downloads here)."""
    present = Path(CHROMIUM).exists() or shutil.which("chromium") is not None
    service_required("chromium (apt-get install chromium)", present)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser
        finally:
            browser.close()


class FakeExecutor:
    """Posts what the executor posts, with the job's token."""

    def __init__(self, base_url: str, job_id: int):
        self.http = httpx.Client(
            base_url=f"{base_url}/api/v1/executor/jobs/{job_id}/",
            headers={"Authorization": f"Bearer {make_token(0, SECRET)}"},
            timeout=10,
        )
        self.seq = 0
        self.metric_seq = 0

    def log(self, *texts, stream="stdout"):
        lines = []
        for text in texts:
            self.seq += 1
            lines.append({"seq": self.seq, "stream": stream, "ts": time.time(), "text": text})
        self.http.post("logs", json={"worker": 0, "lines": lines}).raise_for_status()

    def metric(self, name, step, value):
        self.metric_seq += 1
        point = {"seq": self.metric_seq, "name": name, "step": step, "value": value}
        self.http.post("metrics", json={"worker": 0, "metrics": [point]}).raise_for_status()

    def exited(self):
        body = {"worker": 0, "event": "exited", "outcome": "succeeded", "exit_code": 0}
        self.http.post("status", json=body).raise_for_status()


def test_job_page_shows_new_lines_and_a_growing_chart(asgi_server, owner, project):
    job = submit_job(owner, project, name="mnist", command="python train.py")
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token(SECRET))
    transition(job, "running", "running")
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value

    executor = FakeExecutor(asgi_server, job.pk)
    executor.log(*[f"epoch 0 batch {i}" for i in range(1, 21)])
    executor.metric("loss", 1, 2.0)

    with chromium() as browser:
        watch_the_job(browser, asgi_server, session, executor, job.pk)


def watch_the_job(browser, base_url, session, executor, job_id):
    from playwright.sync_api import expect

    # The page runs under Gantry's Content-Security-Policy (script-src 'self'), so the
    # waits use Playwright's locators, not evaluated strings.
    context = browser.new_context()
    context.add_cookies([{"name": "sessionid", "value": session, "url": base_url}])
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            msg.type == "error"
            and not msg.location.get("url", "").endswith("/favicon.ico")
            and errors.append(f"{msg.text} {msg.location}")
        ),
    )
    page.on(
        "response",
        lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"),
    )
    page.goto(f"{base_url}/jobs/{job_id}/")
    lines = page.locator("#log-lines .log-line")
    page.wait_for_selector("#job-page[data-live='live']")
    expect(lines).to_have_count(20)
    page.wait_for_selector(".metric-chart[data-metric='loss'][data-points='1']")

    # A training loop: lines (one in colour) and a loss point per step, while the page watches.
    def train():
        for step in range(2, 12):
            executor.log(f"step {step} \x1b[32mok\x1b[0m", f"step {step} done")
            executor.metric("loss", step, 2.0 / step)
            time.sleep(0.1)

    feeder = threading.Thread(target=train)
    feeder.start()
    feeder.join(30)
    expect(lines.last).to_have_text("step 11 done")
    page.wait_for_selector(".metric-chart[data-metric='loss'][data-points='11']")
    assert page.locator("#log-lines .log-line .ansi-fg-2").first.text_content() == "ok"

    # The socket drops: the page says so, resumes from its last seq, repeats nothing.
    page.dispatch_event("#job-page", "live:drop")
    page.wait_for_selector("#job-page[data-live='reconnecting…']")
    executor.log("after the drop 1", "after the drop 2")
    page.wait_for_selector("#job-page[data-live='live']")
    expect(lines.last).to_have_text("after the drop 2")
    seqs = [int(seq) for seq in lines.evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert seqs == list(range(1, executor.seq + 1))

    # The job ends: the badge and the timeline change without a reload.
    executor.exited()
    expect(page.locator("#job-state")).to_have_text("Succeeded")
    assert "running → succeeded" in page.locator("#job-timeline").inner_text()

    # Search within the loaded log.
    page.fill("#log-search", "batch 1")
    expect(page.locator("#log-search-count")).to_have_text("0/11")
    assert errors == []
    context.close()
