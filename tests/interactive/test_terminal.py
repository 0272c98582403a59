"""A terminal inside a running job (interactive/terminal.py, interactive/terminal_consumers.py).

The end-to-end test drives `config.asgi.application` (origin check, session auth,
routing) with channels' WebsocketCommunicator against real sandboxed jobs: a live
server, real executors, bubblewrap, and a shell that enters the job's namespaces. The
fast tests cover what needs no process: refusals, the query, the Kubernetes exec request
(kwok pods run no containers, so no exec API answers there: the request built is what
can be checked).
"""

import asyncio
import json
import os
import secrets
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from accounts import services as account_services
from accounts.models import TokenScope
from config.asgi import application
from core.models import AuditEvent
from interactive import terminal
from interactive.terminal_consumers import parse_terminal_query
from jobs.compute import sandbox
from jobs.models import Job, JobWorker
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from tests.conftest import service_required
from tests.jobs.conftest import wait_for, wait_until

WAITER = "import os, time\nopen('ready', 'w').close()\ntime.sleep(600)\n"


def session_cookie(user):
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_terminal(job, cookie=None, query="", token=None):
    headers = [(b"origin", b"http://testserver")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    communicator = WebsocketCommunicator(
        application, f"/ws/jobs/{job.pk}/terminal/?{query}", headers
    )
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def refusal(communicator):
    """(close code, the error message sent before it)."""
    first = await communicator.receive_output(timeout=10)
    detail = json.loads(first["text"])["error"]
    closed = await communicator.receive_output(timeout=10)
    assert closed["type"] == "websocket.close"
    return closed["code"], detail


async def read_until_exit(communicator, timeout=30):
    """(every byte the terminal sent, the exit code)."""
    output = b""
    while True:
        message = await communicator.receive_output(timeout=timeout)
        if message["type"] == "websocket.close":
            raise AssertionError(f"closed without an exit code; output {output!r}")
        if message.get("bytes") is not None:
            output += message["bytes"]
        elif message.get("text"):
            return output, json.loads(message["text"])["exit"]


async def read_until(communicator, marker: bytes, timeout=30):
    output = b""
    while marker not in output:
        try:
            message = await communicator.receive_output(timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"no {marker!r} in {output!r}") from None
        assert message["type"] != "websocket.close", output
        output += message.get("bytes") or b""
    return output


def processes_with(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


# --- fast: no processes -----------------------------------------------------------------


def test_the_query_names_a_worker_a_command_and_a_size():
    assert parse_terminal_query(b"", 1) == (0, None, 80, 24)
    rank, command, cols, rows = parse_terminal_query(
        b"worker=1&command=%5B%22ls%22%2C%20%22-l%22%5D&cols=120&rows=40", 2
    )
    assert (rank, command, cols, rows) == (1, ["ls", "-l"], 120, 40)
    for bad, words in [
        (b"worker=2", "workers 0 to 1"),
        (b"worker=x", "rank"),
        (b"command=ls", "JSON list of strings"),
        (b"command=%5B%5D", "JSON list of strings"),
        (b"command=%5B1%5D", "JSON list of strings"),
        (b"cols=wide", "cols must be a number"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_terminal_query(bad, 2)


def test_the_kubernetes_exec_request_opens_a_tty_in_the_executor_container():
    shell = terminal.exec_request("gantry-lab-a", "j12-a1-0-xyz", None)
    assert shell == {
        "name": "j12-a1-0-xyz",
        "namespace": "gantry-lab-a",
        "container": "executor",
        "command": terminal.SHELL,
        "stdin": True,
        "stdout": True,
        "stderr": True,
        "tty": True,
        "binary": True,
        "_preload_content": False,
    }
    assert terminal.exec_request("ns", "pod", ["nvidia-smi"])["command"] == ["nvidia-smi"]


def test_the_exec_api_call_is_built_from_the_request():
    """kubernetes.stream's own request building, with a transport that records the URL
    the API server would get instead of connecting (no cluster here)."""
    from kubernetes import client
    from kubernetes.stream import ws_client
    from kubernetes.stream.stream import _websocket_request

    seen = {}

    def transport(configuration, method, url, **kwargs):
        seen.update(url=ws_client.get_websocket_url(url), binary=kwargs.get("binary"))
        return ws_client.WSResponse(b"", 200)

    core = client.CoreV1Api(client.ApiClient(client.Configuration(host="https://k8s.test")))
    _websocket_request(
        transport,
        None,
        core.connect_get_namespaced_pod_exec,
        **terminal.exec_request("gantry-lab-a", "pod-0", ["echo", "hi"]),
    )
    assert seen["url"].startswith("wss://k8s.test/api/v1/namespaces/gantry-lab-a/pods/pod-0/exec?")
    for part in ("command=echo", "command=hi", "container=executor", "tty=True", "stdin=True"):
        assert part.lower() in seen["url"].lower(), seen["url"]
    assert seen["binary"] is True


@pytest.mark.django_db(transaction=True)
def test_refusals_say_why_and_close_with_their_code(owner, member, outsider, project):
    job = submit_job(owner, project, name="queued", command="python train.py")
    _, read_only = account_services.create_api_token(actor=owner, name="ro")
    _, write = account_services.create_api_token(actor=owner, name="rw", scope=TokenScope.WRITE)

    viewer, stranger, maintainer = map(session_cookie, (member, outsider, owner))

    async def scenario():
        assert (await refusal(await open_terminal(job)))[0] == 4401
        code, detail = await refusal(await open_terminal(job, viewer))
        assert code == 4403 and "job.exec" in detail
        assert (await refusal(await open_terminal(job, stranger)))[0] == 4404
        assert (await refusal(await open_terminal(Job(pk=999_999), maintainer)))[0] == 4404
        assert (await refusal(await open_terminal(job, token=read_only)))[0] == 4403
        code, detail = await refusal(await open_terminal(job, maintainer, "worker=3"))
        assert code == 4400 and "workers 0 to 0" in detail
        code, detail = await refusal(await open_terminal(job, token=write))
        assert code == 4409 and "queued, not running" in detail

    async_to_sync(scenario)()
    assert not AuditEvent.objects.filter(action="job.exec").exists()


# --- end to end: real sandboxed jobs --------------------------------------------------------


@pytest.fixture
def sandboxed(job_settings, tmp_path):
    status = sandbox.sandbox_status()
    service_required(f"the job sandbox ({status.reason})", status.available)
    data = tmp_path.parent / f"{tmp_path.name}-data"
    data.mkdir(parents=True, exist_ok=True)
    job_settings.DATA_DIR = data
    job_settings.GANTRY_WS_RECHECK_SECONDS = 0.5
    return job_settings


def started(job):
    wait_for(job, "running")
    worker = JobWorker.objects.get(job=job, rank=0)
    wait_until(
        lambda: (
            worker.refresh_from_db()
            or (worker.child_pid and os.path.exists(os.path.join(worker.workdir, "ready")))
        ),
        what=f"job {job.pk}'s command",
    )
    return worker


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_shell_in_a_running_job_sees_that_job_only_and_returns_its_exit_code(
    sandboxed, running_jobs, owner, member, outsider, project, other_project, tmp_path
):
    waiter = tmp_path / "wait.py"
    waiter.write_text(WAITER)
    secret = "tenant B weights " + secrets.token_hex(8)
    other = submit_job(outsider, other_project, name="b", command=f"python {waiter}")
    job = submit_job(owner, project, name="a", command=f"python {waiter}")
    other_worker = started(other)
    started(job)
    (Path(other_worker.workdir) / "weights.txt").write_text(secret)
    cookie = session_cookie(owner)
    key = Path(sandboxed.DATA_DIR) / "secret_key"
    key.write_text("gantry secret " + secrets.token_hex(8))

    async def scenario():
        shell = await open_terminal(job, cookie, "cols=100&rows=30")
        await shell.send_input({"type": "websocket.receive", "text": '{"resize": [132, 43]}'})
        await shell.send_to(bytes_data=b"echo hello-$((6*7)) $(stty size) $(id -u) $PWD\n")
        seen = await read_until(shell, b" /job\r\n")
        assert f"hello-42 43 132 {sandbox.job_uid(job)} /job".encode() in seen
        # Nothing of the other job (its workdir, its processes) or of Gantry.
        probe = (
            f"cat {other_worker.workdir}/weights.txt; cat {key}; "
            f"ls /proc | grep -c '^[0-9]'; env | grep -c -e SECRET -e DATABASE_URL; "
            "echo probe-done\n"
        )
        await shell.send_to(bytes_data=probe.encode())
        seen = await read_until(shell, b"probe-done\r\n")
        await shell.send_to(bytes_data=b"exit 3\n")
        rest, code = await read_until_exit(shell)
        return seen + rest, code

    output, code = async_to_sync(scenario)()
    assert code == 3
    assert secret.encode() not in output and b"gantry secret" not in output
    assert output.count(b"No such file or directory") == 2
    lines = output.decode(errors="replace").split("\r\n")
    counts = [
        ln.strip() for ln in lines[lines.index(next(ln for ln in lines if "No such" in ln)) :]
    ]
    numbers = [int(x) for x in counts if x.isdigit()]
    # Its own PID namespace: bwrap's init, the job's python, the shell and its pipeline.
    assert numbers[0] < 10 and numbers[1] == 0, output

    async def one_command():
        command = json.dumps(["sh", "-c", "id -u; echo to-stderr >&2; exit 7"])
        communicator = await open_terminal(job, cookie, "command=" + quote(command))
        return await read_until_exit(communicator)

    output, code = async_to_sync(one_command)()
    assert code == 7
    assert output == f"{sandbox.job_uid(job)}\nto-stderr\n".encode()
    events = AuditEvent.objects.filter(action="job.exec", object_id=str(job.pk))
    assert [e.details["command"] for e in events.order_by("pk")] == [
        "shell",
        ["sh", "-c", "id -u; echo to-stderr >&2; exit 7"],
    ]

    # A client that goes away takes its terminal with it.
    marker = f"sleep 600 # {secrets.token_hex(6)}"

    async def gone_away():
        query = "command=" + quote(json.dumps(["sh", "-c", marker]))
        communicator = await open_terminal(job, cookie, query)
        for _ in range(300):
            if processes_with(marker):
                break
            await asyncio.sleep(0.05)
        running = processes_with(marker)
        await communicator.disconnect()
        return running

    assert async_to_sync(gone_away)(), "the terminal's command never started"
    wait_until(lambda: not processes_with(marker), timeout=15, what="the terminal to end")

    # The terminal ends with the job.
    async def ended_by_the_job():
        shell = await open_terminal(job, cookie)
        await shell.send_to(bytes_data=b"echo ready-$((1+1))\n")
        await read_until(shell, b"ready-2")
        await sync_cancel(owner, job)
        return await read_until_exit(shell, timeout=60)

    from asgiref.sync import sync_to_async

    sync_cancel = sync_to_async(cancel_job)
    _, code = async_to_sync(ended_by_the_job)()
    assert code != 0
    wait_for(job, "cancelled")
    cancel_job(outsider, other)


def test_the_job_page_offers_the_terminal_to_those_with_job_exec_only(
    client, owner, member, project
):
    from jobs.states import transition

    job = submit_job(owner, project, name="page", command="python train.py")
    client.force_login(owner)
    assert b'id="job-terminal"' not in client.get(f"/jobs/{job.pk}/").content  # queued
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token("s3cret"))
    transition(job, "running", "test")
    page = client.get(f"/jobs/{job.pk}/")
    assert f'data-ws-path="/ws/jobs/{job.pk}/terminal/"'.encode() in page.content
    assert b"vendor/xterm/xterm.js" in page.content
    client.force_login(member)  # a viewer of the project
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200 and b'id="job-terminal"' not in page.content


@pytest.fixture
def sleeping_worker(owner, project, tmp_path):
    """A job's worker row whose command is a real process of ours (not sandboxed)."""
    import subprocess
    import sys

    from jobs.compute.local import process_start_time

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    job = submit_job(owner, project, name="w", command="python train.py")
    worker = JobWorker.objects.get(job=job, rank=0)
    worker.child_pid, worker.child_start_time = proc.pid, process_start_time(proc.pid)
    worker.workdir = str(tmp_path)
    yield job, worker
    proc.kill()
    proc.wait()


def test_a_shell_is_never_opened_outside_a_sandbox_that_should_be_there(sleeping_worker):
    status = sandbox.sandbox_status()
    service_required(f"the job sandbox ({status.reason})", status.available)
    job, worker = sleeping_worker
    with pytest.raises(terminal.TerminalError, match="sandbox was not found"):
        terminal.LocalSession(job, worker, None).argv_and_env()


def test_without_a_sandbox_the_shell_runs_in_the_workdir_without_gantrys_environment(
    sleeping_worker, settings, monkeypatch
):
    settings.GANTRY_SANDBOX = "off"
    monkeypatch.setenv("SECRET_KEY", "not for jobs")
    job, worker = sleeping_worker
    argv, env, cwd = terminal.LocalSession(job, worker, ["id"]).argv_and_env()
    assert argv == ["id"] and cwd == worker.workdir
    assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
    assert env["HOME"] == worker.workdir and env["TERM"] == "xterm-256color"
    worker.child_start_time += 1  # another process now has that pid
    with pytest.raises(terminal.TerminalError, match="not running"):
        terminal.LocalSession(job, worker, None).argv_and_env()


class ExecStream:
    """Stands in for kubernetes.stream's WSClient (no container can run here: kwok pods
    have none): stdout/stderr frames to hand out, what was written per channel."""

    def __init__(self, frames, returncode):
        self.frames, self.written, self.open = list(frames), [], True
        self.code = returncode

    def is_open(self):
        return self.open

    def update(self, timeout=0):
        if not self.frames:
            self.open = False

    def peek_channel(self, channel, timeout=0):
        return bool(self.frames) and self.frames[0][0] == channel

    def read_channel(self, channel, timeout=0):
        return self.frames.pop(0)[1]

    def write_channel(self, channel, data):
        self.written.append((channel, data))

    @property
    def returncode(self):
        return None if self.open else self.code

    def close(self):
        self.open = False


def test_a_kubernetes_session_relays_both_streams_sizes_and_the_exit_code(monkeypatch):
    fake = ExecStream([(terminal.STDOUT, b"hello\r\n"), (terminal.STDERR, b"oops\r\n")], 3)
    conn = SimpleNamespace(
        ref=SimpleNamespace(name="lab"),
        core=SimpleNamespace(connect_get_namespaced_pod_exec=None),
    )
    monkeypatch.setattr(terminal, "worker_pod", lambda job, rank: (conn, "ns", "pod"))
    monkeypatch.setattr("kubernetes.stream.stream", lambda *a, **kw: fake)

    async def scenario():
        session = terminal.open_session(
            Job(pk=1, backend="kubernetes"), JobWorker(rank=0), ["make"]
        )
        await session.start(100, 40)
        session.write(b"ls\r")
        output = b""
        while (chunk := await session.output.get()) is not None:
            output += chunk
        return output, await session.wait()

    output, code = async_to_sync(scenario)()
    assert output == b"hello\r\noops\r\n" and code == 3
    assert fake.written == [
        (terminal.RESIZE, json.dumps({"Width": 100, "Height": 40})),
        (terminal.STDIN, b"ls\r"),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_pod_lookup_thread_hands_its_database_connection_back(monkeypatch):
    """A Kubernetes terminal looks its pod up in asyncio.to_thread, outside Django's request
    cycle: unless that thread closes its connection, each terminal keeps one for good (on
    PostgreSQL a pooled one: CI's pass ran the pool of 8 dry and later jobs could not fetch
    their specs). The lookup's queries are played by one query here (no cluster)."""
    import threading

    from django.db import connection

    from jobs.models import Job

    seen = {}

    def lookup(job, rank):
        Job.objects.count()
        seen["open during"] = connection.connection is not None
        return "conn", "namespace", "pod"

    monkeypatch.setattr(terminal, "worker_pod", lookup)

    def in_a_thread():
        assert terminal.pod_from_thread(None, 0) == ("conn", "namespace", "pod")
        seen["closed after"] = connection.connection is None

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == {"open during": True, "closed after": True}
