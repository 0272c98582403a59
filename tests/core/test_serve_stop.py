"""`make run` stops everything it started, promptly (issue 42 item 3).

`manage.py serve` runs as `make run` runs it, over the test database. A browser-like
client enters a job's TensorBoard through the notebook origin with a ticket, so the
origin starts a real TensorBoard server (sandboxed where jobs are), and a second
connection sends half a request. Then Ctrl-C: every process serve started, the TensorBoard and
whatever runs under it included, must be gone when serve has exited, even with a request
still in flight at the origin. The stop time is printed (`-s` shows it), not asserted.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from interactive import tensorboard
from tests.core.test_run import free_port
from tests.interactive.notebooks import Browser
from tests.interactive.test_tensorboard import job_with_logdir
from tests.jobs.test_browser import _database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(settings.BASE_DIR)
WRITE_SCALAR = (
    "from tensorboard.summary import DirectoryOutput, Writer; "
    "w = Writer(DirectoryOutput('{logdir}')); w.add_scalar('loss', 0.5, step=1); w.close()"
)


def descendants(root: int) -> set[int]:
    """Every process under `root` (its session's and those that left it), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_ctrl_c_stops_serve_and_the_tensorboard_it_started(owner, project, client_for, tmp_path, settings):
    data = tmp_path / "data"
    port, notebook_port = free_port(), free_port()
    origin = f"http://{{job}}.nb.localhost:{notebook_port}"
    settings.GANTRY_NOTEBOOK_ORIGIN = origin  # where Gantry's tickets send the browser
    settings.GANTRY_JOBS_DIR = data / "jobs"
    workdir = data / "jobs" / "1" / "w"
    job = job_with_logdir(owner, project, workdir, events=False)
    subprocess.run(
        [sys.executable, "-c", WRITE_SCALAR.format(logdir=workdir / "runs")], check=True, timeout=60
    )
    os.chmod(workdir, 0o755)  # the job's user (TensorBoard's, sandboxed) reads it
    env = {
        **{k: v for k, v in os.environ.items() if k != "REDIS_URL"},
        "DATABASE_URL": _database_url(),
        "SECRET_KEY": settings.SECRET_KEY,  # the tickets minted here must hold there
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_NOTEBOOK_PORT": str(notebook_port),
        "GANTRY_NOTEBOOK_ORIGIN": origin,
        "GANTRY_WORKERS": "1",
    }
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        # A session of its own, as a terminal gives `make run`: Ctrl-C reaches the group.
        serve = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{notebook_port}/", timeout=2)
                break
            except httpx.TransportError:
                assert serve.poll() is None, log_path.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, "the notebook origin did not answer"
                time.sleep(0.3)

        browser = Browser(notebook_port, client_for(owner))
        board = f"/jobs/{job.pk}/tensorboard/"
        to_gantry = httpx.URL(browser.request("GET", job.pk, board).headers["location"])
        enter = httpx.URL(browser.gantry.get(f"{to_gantry.path}?{to_gantry.query.decode()}")["Location"])
        entered = browser.request("GET", job.pk, f"{enter.path}?{enter.query.decode()}")
        assert entered.status_code == 302, entered.text[:300]
        deadline = time.monotonic() + 180
        while (answer := browser.request("GET", job.pk, board)).status_code != 200:
            assert answer.status_code == 503, (answer.status_code, answer.text[:300])
            board_log = tensorboard.run_dir(job).parent / f"{job.pk}.log"
            assert time.monotonic() < deadline, board_log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        # A tab with a request in flight (an upload half sent): the origin is still
        # answering it when Ctrl-C comes.
        slow = socket.create_connection(("127.0.0.1", notebook_port))
        head = [
            f"POST {board}data/plugin/scalars/tags HTTP/1.1",
            f"Host: {browser.host(job.pk)}",
            f"Origin: {browser.origin(job.pk)}",
            *(f"{k}: {v}" for k, v in browser.cookie_header(job.pk).items()),
            "Content-Type: application/octet-stream",
            "Content-Length: 1000000",
        ]
        slow.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b"x" * 1000)
        time.sleep(1)
        started = descendants(serve.pid)
        board_pid = json.loads((tensorboard.run_dir(job).parent / f"{job.pk}.pid").read_text())["pid"]
        assert board_pid in started, "the TensorBoard is not under serve"

        listing = subprocess.run(
            ["ps", "-o", "pid,ppid,sid,user,args", "-p", ",".join(map(str, sorted(started)))],
            capture_output=True, text=True,
        ).stdout
        stopping = time.monotonic()
        os.killpg(serve.pid, signal.SIGINT)  # Ctrl-C in the terminal running `make run`
        serve.wait(timeout=60)
        took = time.monotonic() - stopping
        print(f"\nserve stopped in {took:.1f} s; under it were:\n{listing}")
        deadline = time.monotonic() + 10  # a process SIGKILLed last may still be exiting
        while (left := sorted(p for p in started if alive(p))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], subprocess.run(
            ["ps", "-o", "pid,ppid,sid,cmd", "-p", ",".join(map(str, left))], capture_output=True, text=True
        ).stdout
        assert serve.returncode == 0, log_path.read_text(errors="replace")[-3000:]
        slow.close()
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
        for pid in started | descendants(serve.pid):  # what a failure above left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
