"""Helpers for the notebook tests: a real JupyterLab, the notebook origin served by a
real uvicorn, and a small client that behaves like a browser towards both origins.

Nothing here replaces a component: JupyterLab is started with the flags the local
backend gives it (`LocalBackend.notebook_command`: a Unix socket in its working
directory), and a job "runs" it by its worker row pointing at it (the workdir holding
the socket, the token), which is what `interactive.proxy.resolve_target` reads.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from http.cookies import SimpleCookie
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import httpx
from django.conf import settings

from core.ports import free_port
from interactive import proxy
from jobs.compute.local import NOTEBOOK_SOCKET, LocalBackend
from jobs.models import Job, JobWorker
from jobs.states import transition

KERNEL_PROTOCOL = "v1.kernel.websocket.jupyter.org"


def lab_get(target: proxy.NotebookTarget, path: str, timeout=5, **kwargs) -> httpx.Response:
    """GET `path` of a JupyterLab directly (its token in `headers`), over its Unix socket
    as the notebook origin connects (raises OSError / httpx.TransportError when down)."""
    if not target.uds:
        return httpx.get(target.url("http", path), timeout=timeout, **kwargs)
    fd = proxy.open_notebook_socket(target)
    try:
        transport = httpx.HTTPTransport(uds=f"/proc/self/fd/{fd}")
        with httpx.Client(transport=transport, trust_env=False) as client:
            return client.get(target.url("http", path), timeout=timeout, **kwargs)
    finally:
        os.close(fd)


def wait_until_up(url, what: str, process=None, log: Path | None = None, headers=None, timeout=90):
    """Wait for `url` (or a NotebookTarget's api/status) to answer below 500."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if isinstance(url, proxy.NotebookTarget):
                answer = lab_get(url, "api/status", timeout=2, headers=headers or {})
            else:
                answer = httpx.get(url, headers=headers or {}, timeout=2)
            if answer.status_code < 500:
                return answer
        except (httpx.TransportError, OSError):
            pass
        if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise AssertionError(f"{what} did not start: {tail}")
        time.sleep(0.25)


@contextlib.contextmanager
def jupyterlab(home: Path, pk: int):
    """JupyterLab as the local backend starts it for job `pk` (its argv, JUPYTER_TOKEN in
    the environment), in `home`/work; yields (NotebookTarget, process)."""
    root = home / "work"
    root.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    job, worker = SimpleNamespace(pk=pk, runtime=""), SimpleNamespace(port=None)
    argv = LocalBackend().notebook_command(job, worker)
    argv = [a for a in argv if a != "--ServerApp.root_dir=."] + [f"--ServerApp.root_dir={root}"]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")},
        "JUPYTER_TOKEN": token,
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        # As in a job: `executor` (its notebook_trust hook) comes from Gantry's source.
        "PYTHONPATH": str(settings.BASE_DIR),
    }
    log_path = home / "jupyterlab.log"
    log = log_path.open("wb")
    server = subprocess.Popen(
        [sys.executable, *argv[1:]],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    target = proxy.NotebookTarget(
        "localhost",
        0,
        token,
        f"/jobs/{pk}/lab/",
        uds=str(root / NOTEBOOK_SOCKET),
        uid=os.lstat(root).st_uid,
    )
    try:
        wait_until_up(
            target,
            "JupyterLab",
            server,
            log_path,
            headers={"Authorization": f"token {token}"},
        )
        yield target, server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGCONT)
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def run_notebook(job: Job, target: proxy.NotebookTarget) -> Job:
    """Make `job` a running notebook served by `target` (the state and worker row the
    local backend leaves behind when it has started one)."""
    job.kind = "notebook"
    job.save(update_fields=["kind"])
    transition(job, "admitted", "test")
    transition(job, "starting", "test")
    transition(job, "running", "running")
    JobWorker.objects.update_or_create(
        job=job,
        rank=0,
        defaults={
            "host": "",
            "port": None,
            "notebook_token": target.token,
            "workdir": os.path.dirname(target.uds),
        },
    )
    return job


class OriginServer:
    """`interactive.origin` under uvicorn in a thread of this process (same database)."""

    def __init__(self):
        import uvicorn

        from interactive.origin import application

        self.port = free_port()
        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            lifespan="off",
            log_level="warning",
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the notebook origin did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def origin_template(self) -> str:
        return f"http://{{job}}.nb.localhost:{self.port}"


class Browser:
    """What a browser does towards Gantry (a Django test client, signed in) and towards
    the notebook origins (raw HTTP to 127.0.0.1 with the job's Host header, and one
    cookie jar per notebook host, as host-only cookies are kept)."""

    def __init__(self, origin_port: int, gantry=None, gantry_url: str | None = None):
        self.port = origin_port
        # A django.test.Client, an httpx.Client on a served Gantry, or None (signed out).
        self.gantry = gantry
        self.gantry_url = gantry_url or settings.GANTRY_URL
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{origin_port}", timeout=90)
        self.jars: dict[int, dict[str, str]] = {}

    def host(self, pk: int) -> str:
        return f"{pk}.nb.localhost:{self.port}"

    def origin(self, pk: int) -> str:
        return f"http://{self.host(pk)}"

    def cookie_header(self, pk: int) -> dict[str, str]:
        jar = self.jars.get(pk) or {}
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())} if jar else {}

    def request(self, method: str, pk: int, path: str, headers=None, **kwargs) -> httpx.Response:
        sent = {"Host": self.host(pk), **self.cookie_header(pk), **(headers or {})}
        response = self.http.request(method, path, headers=sent, **kwargs)
        jar = self.jars.setdefault(pk, {})
        for line in response.headers.get_list("set-cookie"):
            for name, morsel in SimpleCookie(line).items():
                if morsel["max-age"] == "0":
                    jar.pop(name, None)
                else:
                    jar[name] = morsel.value
        return response

    def unsafe(self, method: str, pk: int, path: str, **kwargs) -> httpx.Response:
        """A request as JupyterLab's frontend sends it: same origin, X-XSRFToken."""
        headers = {"Origin": self.origin(pk), "X-XSRFToken": self.jars[pk]["_xsrf"]}
        headers.update(kwargs.pop("headers", {}))
        return self.request(method, pk, path, headers=headers, **kwargs)

    def ticket_for(self, pk: int, path: str = "lab") -> str:
        """Start entering: the origin's redirect to Gantry, Gantry's answer (a ticket)."""
        start = self.request("GET", pk, f"/jobs/{pk}/lab/{path}")
        assert start.status_code == 302, (start.status_code, start.text[:300])
        to_gantry = urlsplit(start.headers["location"])
        assert f"{to_gantry.scheme}://{to_gantry.netloc}" == self.gantry_url
        answer = self.gantry.get(f"{to_gantry.path}?{to_gantry.query}")
        assert answer.status_code == 302, answer.status_code
        back = urlsplit(
            answer.headers["location"] if isinstance(answer, httpx.Response) else answer["Location"]
        )
        assert f"{back.scheme}://{back.netloc}" == self.origin(pk)
        assert back.path == proxy.ENTER_PATH
        return parse_qs(back.query)["ticket"][0]

    def redeem(self, pk: int, ticket: str) -> httpx.Response:
        return self.request("GET", pk, f"{proxy.ENTER_PATH}?ticket={ticket}")

    def enter(self, pk: int, path: str = "lab") -> httpx.Response:
        """The whole hand-off, then the page it lands on (which sets `_xsrf`)."""
        entered = self.redeem(pk, self.ticket_for(pk, path))
        assert entered.status_code == 302, (entered.status_code, entered.text[:300])
        assert entered.headers["location"] == f"/jobs/{pk}/lab/{path}"
        return self.request("GET", pk, entered.headers["location"])

    def websocket(self, pk: int, path: str, subprotocols=None, origin: str | None = None):
        from websockets.sync.client import connect

        headers = {**self.cookie_header(pk), "Origin": origin or self.origin(pk)}
        sock = socket.create_connection(("127.0.0.1", self.port))
        return connect(
            f"ws://{self.host(pk)}{path}",
            sock=sock,
            additional_headers=headers,
            subprotocols=subprotocols,
            open_timeout=30,
            max_size=None,
        )


def served_database_url() -> str:
    """The test database, as DATABASE_URL for a server process."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}?timeout=20"


@contextlib.contextmanager
def served(tmp_path: Path, *, notebook_timeout: float = 3.0):
    """Gantry (config.asgi) and the notebook origin (interactive.origin), each under
    uvicorn in a process of its own, over the test database, as `manage.py serve` runs
    them; yields (Gantry's URL, the origin's port)."""
    gantry_port, origin_port = free_port(), free_port()
    gantry_url = f"http://127.0.0.1:{gantry_port}"
    env = {
        **os.environ,
        "GANTRY_ENV": "development",
        "DEBUG": "true",
        "DATABASE_URL": served_database_url(),
        "GANTRY_DATA_DIR": str(tmp_path / "data"),
        "SECRET_KEY": settings.SECRET_KEY,  # the test's session cookies must be valid there
        "LOG_LEVEL": "WARNING",
        "GANTRY_URL": gantry_url,
        "GANTRY_NOTEBOOK_ORIGIN": f"http://{{job}}.nb.localhost:{origin_port}",
        "GANTRY_NOTEBOOK_TIMEOUT_SECONDS": str(notebook_timeout),
    }
    servers = []
    try:
        for name, app, port in [
            ("gantry", "config.asgi:application", gantry_port),
            ("notebooks", "interactive.origin:application", origin_port),
        ]:
            log_path = tmp_path / f"{name}.log"
            log = log_path.open("wb")
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    app,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--lifespan",
                    "off",
                    "--no-access-log",
                ],
                cwd=settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            servers.append((process, log))
            wait_until_up(f"http://127.0.0.1:{port}/healthz", name, process, log_path)
        yield gantry_url, origin_port
    finally:
        for process, log in servers:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.close()


def gantry_session(gantry_url: str, user) -> httpx.Client:
    """An HTTP client on a served Gantry, signed in as `user` (a session made here)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    http = httpx.Client(base_url=gantry_url, timeout=30)
    http.cookies.set(settings.SESSION_COOKIE_NAME, session)
    return http
