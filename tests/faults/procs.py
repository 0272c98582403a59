"""Real processes the fault tests start, stop, kill and restart: uvicorn and `manage.py qcluster`.

Both run over the test database (a SQLite file, or the PostgreSQL test database), so
the test, the web server, the background worker and the executors share one state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

from core.ports import free_port


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}?timeout=20"


def script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM, wait: float = 10) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Uvicorn:
    """`uvicorn config.asgi:application` on a fixed port, so it can be stopped and started again."""

    def __init__(self, folder: Path, **env):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "uvicorn.log"
        self.env = {
            **os.environ,
            "GANTRY_ENV": "development",
            "DEBUG": "true",  # static files straight from the source folders
            "DATABASE_URL": database_url(),
            "GANTRY_DATA_DIR": str(folder / "web-data"),
            "SECRET_KEY": settings.SECRET_KEY,  # session cookies made by the test are valid there
            "GANTRY_HEARTBEAT_SECONDS": str(settings.GANTRY_HEARTBEAT_SECONDS),
            "GANTRY_JOB_GRACE_SECONDS": str(settings.GANTRY_JOB_GRACE_SECONDS),
            "LOG_LEVEL": "WARNING",
            **env,
        }
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "config.asgi:application"]
                + ["--host", "127.0.0.1", "--port", str(self.port)]
                + ["--lifespan", "off", "--no-access-log", "--timeout-graceful-shutdown", "2"],
                cwd=settings.BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.url + "/accounts/login/", timeout=2)
                return
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"uvicorn did not start: {self.log_text()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)

    def restart(self, down_seconds: float = 0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()


class QCluster:
    """`manage.py qcluster`, in its own process group (so SIGKILL takes all its processes,
    but not the executors, which run in their own sessions)."""

    def __init__(self, folder: Path, gantry_url: str):
        self.log_path = folder / "qcluster.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "GANTRY_DATA_DIR": str(folder / "qdata"),
            "SECRET_KEY": settings.SECRET_KEY,  # django-q signs queued tasks with it
            "GANTRY_URL": gantry_url,
            "GANTRY_JOBS_DIR": str(settings.GANTRY_JOBS_DIR),
            "GANTRY_LOCAL_CPUS": str(settings.GANTRY_LOCAL_CPUS),
            "GANTRY_LOCAL_MEMORY_MB": str(settings.GANTRY_LOCAL_MEMORY_MB),
            "GANTRY_HEARTBEAT_SECONDS": str(settings.GANTRY_HEARTBEAT_SECONDS),
            "GANTRY_JOB_GRACE_SECONDS": str(settings.GANTRY_JOB_GRACE_SECONDS),
            "GANTRY_WORKERS": "1",
            "GANTRY_SANDBOX": settings.GANTRY_SANDBOX,
            "GANTRY_ALLOW_UNISOLATED_JOBS": str(settings.GANTRY_ALLOW_UNISOLATED_JOBS).lower(),
        }
        self.proc: subprocess.Popen | None = None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=settings.BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL to the whole cluster: sentinel, pusher, monitor, workers, scheduler."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc, wait=5)
