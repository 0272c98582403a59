"""`gantry logs -f` across a web server restart: the socket drops, the CLI reconnects from
its last sequence number per worker, and the output holds every line exactly once.

The job prints half its lines, then waits for a file the test writes once uvicorn is
restarting, so lines are logged both before the drop and after it, whatever the load."""

import subprocess
import threading
import time

import pytest

from jobs.models import Job
from jobs.queries import log_lines
from tests.cli.conftest import cli_env, gantry_command

pytestmark = pytest.mark.slow

LINES = 80
HALF = 40


def test_logs_follow_survives_a_server_restart(
    gantry_server, gantry_cli, write_token, project, tmp_path
):
    code = tmp_path / "counting"
    code.mkdir()
    go = tmp_path / "go"
    (code / "count.py").write_text(
        "import os, time\n"
        f"for i in range(1, {LINES} + 1):\n"
        f"    while i > {HALF} and not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.05)\n"
        "    print(f'line {i}', flush=True)\n"
        "    time.sleep(0.02)\n"
    )
    submitted = gantry_cli(
        "run", "-p", "vision", "--name", "count", "--", "python", "count.py",
        url=gantry_server.url, cwd=code,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = Job.objects.get(name="count")

    follower = subprocess.Popen(
        gantry_command("logs", "-f", str(job.pk)),
        cwd=tmp_path,
        env=cli_env(gantry_server.url, write_token, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(follower.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while f"line {HALF}\n" not in printed:
            assert follower.poll() is None, follower.stderr.read()
            assert time.monotonic() < deadline, f"no lines followed: {printed}"
            time.sleep(0.05)
        gantry_server.restart(down_seconds=1.5)
        go.touch()  # the second half is printed while the CLI reconnects, or after
        returncode = follower.wait(timeout=180)
    finally:
        if follower.poll() is None:
            follower.kill()
    reader.join(timeout=10)

    assert gantry_server.starts == 2
    stderr = follower.stderr.read()
    assert returncode == 0, stderr
    texts = [line.rstrip("\n") for line in printed]
    stored = [line["text"] for line in log_lines(job, limit=10_000)]
    assert texts == stored, (texts, stderr)  # every stored line (the executor's too), once
    assert [t for t in texts if t.startswith("line ")] == [f"line {i}" for i in range(1, LINES + 1)]
    assert f"job {job.pk} succeeded" in stderr
