"""The `gantry` CLI run as a user runs it: a subprocess, against a live Gantry.

`gantry_server` is the fault tests' harness (tests/faults/procs.py): uvicorn serving the
ASGI application (pages, API and the live-log websockets) and `manage.py qcluster` (the
real background worker: admission, launch, reconcile), both over the test database and
one data folder. `gantry_cli(*args)` runs `python -m gantry_cli` with a token of the
owner's in its environment (GANTRY_URL / GANTRY_TOKEN), from a folder of the test's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from accounts import services as account_services
from tests.faults.conftest import _kill_executors
from tests.faults.procs import QCluster, Uvicorn
from tests.jobs.conftest import job_settings  # noqa: F401 - a fixture used here

CLI_TIMEOUT = 240


def cli_env(url: str, token: str, home) -> dict:
    return {
        **os.environ,
        "GANTRY_URL": url,
        "GANTRY_TOKEN": token,
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "COLUMNS": "200",  # Rich tables and bars not wrapped to 80 columns
        "PYTHONUNBUFFERED": "1",
    }


def gantry_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gantry_cli", *args]


@pytest.fixture
def write_token(owner):
    return account_services.create_api_token(actor=owner, name="cli", scope="write")[1]


@pytest.fixture
def gantry_server(job_settings, transactional_db, tmp_path):  # noqa: F811
    """uvicorn + qcluster over the test database and one data folder; stopped afterwards."""
    data = tmp_path.parent / f"{tmp_path.name}-server"
    web = Uvicorn(tmp_path, GANTRY_DATA_DIR=str(data))
    web.start()
    job_settings.GANTRY_URL = web.url
    worker = QCluster(tmp_path, web.url)
    worker.env["GANTRY_DATA_DIR"] = str(data)
    # Sandboxed jobs may read tmp_path (job_settings adds it): a test signals them there.
    worker.env["GANTRY_JOB_READ_ONLY_PATHS"] = ",".join(map(str, job_settings.GANTRY_JOB_READ_ONLY_PATHS))
    worker.start()
    try:
        yield web
    finally:
        from django.db import connection

        connection.close()
        worker.kill()  # SIGKILL: a graceful qcluster stop takes 5 s, and nothing here needs it
        _kill_executors()
        web.stop()


@pytest.fixture
def gantry_cli(tmp_path, write_token):
    """Runs the CLI to completion: gantry_cli(*args, url=..., cwd=...) -> CompletedProcess."""

    def run(*args: str, url: str, cwd=None, token: str | None = None, timeout=CLI_TIMEOUT):
        return subprocess.run(
            gantry_command(*args),
            cwd=cwd or tmp_path,
            env=cli_env(url, token or write_token, tmp_path),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture
def live_gantry(live_server, write_token, tmp_path, settings):
    """The CLI against Django's live server over the test database (no qcluster: a test
    plays what the worker would do): live_gantry(*args, cwd=...) -> CompletedProcess."""
    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 8192

    def run(*args: str, cwd=None):
        return subprocess.run(
            gantry_command(*args),
            cwd=cwd or tmp_path,
            env=cli_env(live_server.url, write_token, tmp_path),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )

    return run
