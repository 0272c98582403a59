"""`make run` end to end: migrate, seed the demo, start web server + worker, sign in."""

import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from core.ports import free_port

ROOT = Path(__file__).resolve().parents[2]



@pytest.mark.slow
def test_serve_brings_up_web_and_worker_and_the_demo_login_works(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(GANTRY_DATA_DIR=str(tmp_path), GANTRY_WORKERS="1", GANTRY_NOTEBOOK_PORT=str(free_port()))
    run = lambda *a: subprocess.run([sys.executable, "manage.py", *a], cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=180)  # noqa: E731
    run("migrate", "--noinput")
    seeded = run("seed_demo").stdout
    assert "admin / gantry-demo" in seeded
    assert "password unchanged" in run("seed_demo").stdout  # idempotent

    port = free_port()
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        deadline = time.monotonic() + 60
        while True:
            try:
                page = opener.open(base + "/accounts/login/", timeout=5).read().decode()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "web server did not answer within 60 s"
                time.sleep(0.3)
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        data = urllib.parse.urlencode({"username": "admin", "password": "gantry-demo", "csrfmiddlewaretoken": csrf}).encode()
        home = opener.open(urllib.request.Request(base + "/accounts/login/", data=data, headers={"Referer": base + "/accounts/login/"}), timeout=10).read().decode()
        assert "Getting started" in home and "Demo Lab" in home
        # The vendored assets are served (no CDN).
        assert opener.open(base + "/static/vendor/htmx/htmx.min.js", timeout=5).status == 200
        # The background worker is running beside the web server.
        children = subprocess.run(["pgrep", "-f", "-s", str(os.getpgid(server.pid)), "qcluster"], capture_output=True, text=True).stdout
        assert children.strip(), "no qcluster process under `serve`"
        # ...behind the web server for the CPU (serve.WORKER_NICENESS), the web at its own.
        web = subprocess.run(["pgrep", "-f", "-s", str(os.getpgid(server.pid)), "uvicorn"], capture_output=True, text=True).stdout
        assert {os.getpriority(os.PRIO_PROCESS, int(pid)) for pid in children.split()} == {min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)}
        assert {os.getpriority(os.PRIO_PROCESS, int(pid)) for pid in web.split()} == {os.getpriority(os.PRIO_PROCESS, 0)}
    finally:
        os.killpg(os.getpgid(server.pid), signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(os.getpgid(server.pid), signal.SIGKILL)
            raise
    assert server.returncode == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls-cert and --tls-key need --production"),
        (["--production", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--web-workers", "0"], "--web-workers and --threads must be 1 or more"),
        # The production stack refuses a development configuration (DEBUG on).
        (["--production"], "--production needs DEBUG off"),
    ],
)
def test_serve_refuses_options_that_do_not_fit_and_starts_nothing(args, message, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "GANTRY_ENV")}
    env.update(GANTRY_DATA_DIR=str(tmp_path), DEBUG="true", GANTRY_NOTEBOOK_PORT=str(free_port()))
    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--port", str(free_port()), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert "Gantry is up" not in result.stdout


@pytest.mark.slow
def test_requests_waiting_in_async_views_do_not_stall_other_requests(tmp_path):
    """The stock ASGI application (what `make run` serves) runs each request on its own:
    two requests parked in an async view leave a plain page to answer at once. (Gantry's
    former handler ran them on two pool threads, and the page waited for them.)"""
    import concurrent.futures

    gate = tmp_path / "gate"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        GANTRY_DATA_DIR=str(tmp_path), GANTRY_TEST_GATE=str(gate),
        DJANGO_SETTINGS_MODULE="tests.core.slow_site.settings",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True, timeout=180)
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", str(port), "--lifespan", "off"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=5).read()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "uvicorn did not answer within 60 s"
                time.sleep(0.3)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            parked = [pool.submit(lambda: urllib.request.urlopen(base + "/slow/", timeout=60).read()) for _ in range(2)]
            deadline = time.monotonic() + 30
            while len(list(tmp_path.glob("entered-*"))) < 2:
                assert time.monotonic() < deadline, "the slow requests never reached the view"
                time.sleep(0.05)
            # Both are waiting in the view; a page answers meanwhile.
            page = urllib.request.urlopen(base + "/accounts/login/", timeout=10)
            assert page.status == 200
            assert not any(f.done() for f in parked), "the gate is shut: nothing can have answered"
            gate.touch()
            assert [f.result(timeout=30) for f in parked] == [b"opened", b"opened"]
    finally:
        os.killpg(os.getpgid(server.pid), signal.SIGTERM)
        server.wait(timeout=20)
