"""`gantry shell` and `gantry exec` against a live Gantry (uvicorn + qcluster + a real,
sandboxed job): the shell runs in a real pty (pexpect) as a user's terminal would, and
the server's terminal is the job's sandbox (interactive/terminal.py)."""

import os
import subprocess
import sys

import pexpect
import pytest

from accounts import services as account_services
from jobs.compute import sandbox
from jobs.models import Job, JobWorker
from jobs.services.submit import submit_job
from tests.cli.conftest import cli_env
from tests.conftest import service_required
from tests.jobs.conftest import wait_until

pytestmark = pytest.mark.slow

SLEEPER = "python -c \"import time; open('ready', 'w').close(); time.sleep(600)\""


def running(job):
    """Wait until the server's worker has the job's command running."""

    def started():
        job.refresh_from_db()
        worker = JobWorker.objects.filter(job=job, rank=0).first()
        return (
            job.state == "running"
            and worker is not None
            and worker.child_pid
            and os.path.exists(os.path.join(worker.workdir, "ready"))
        )

    wait_until(started, timeout=120, what=f"job {job.pk} to run")


def test_gantry_shell_runs_commands_in_the_job_and_a_viewer_is_refused(
    gantry_server, gantry_cli, write_token, owner, member, project, tmp_path
):
    status = sandbox.sandbox_status()
    service_required(f"the job sandbox ({status.reason})", status.available)
    job = submit_job(owner, project, name="sleeper", command=SLEEPER)
    running(job)
    env = cli_env(gantry_server.url, write_token, tmp_path)
    env["TERM"] = "xterm"
    env.pop("COLUMNS")  # the size comes from the pty

    shell = pexpect.spawn(
        sys.executable,
        ["-m", "gantry_cli", "shell", str(job.pk)],
        env=env,
        cwd=str(tmp_path),
        dimensions=(27, 91),
        timeout=60,
    )
    try:
        shell.expect(r"\$ ")
        shell.sendline("echo hello-$((6*7)) $(id -u) $PWD $(stty size)")
        shell.expect(f"hello-42 {sandbox.job_uid(job)} /job 27 91")
        shell.setwinsize(30, 100)  # SIGWINCH: the CLI sends the new size
        shell.sendline("sleep 0.5; echo size-$(stty size | tr ' ' x)")
        shell.expect("size-30x100")
        shell.sendline("exit 5")
        shell.expect(pexpect.EOF)
    finally:
        shell.close(force=True)
    assert shell.exitstatus == 5, shell.before

    done = gantry_cli(
        "exec", str(job.pk), "--", "sh", "-c", "echo out-$((2+2)); ls -1 /job; exit 4",
        url=gantry_server.url,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert done.stdout.splitlines()[0] == "out-4"
    assert "ready" in done.stdout.splitlines()

    # Commands piped in: the shell runs them and ends with the input.
    piped = subprocess.run(
        [sys.executable, "-m", "gantry_cli", "shell", str(job.pk)],
        input=b"echo piped-$((3*3))\nexit_code=7\nexit $exit_code",
        env=cli_env(gantry_server.url, write_token, tmp_path),
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 7, piped.stderr
    assert piped.stdout == b"piped-9\n"

    # A viewer (a tenant member without a project role) may watch the job, not enter it.
    _, viewer_token = account_services.create_api_token(actor=member, name="cli", scope="write")
    refused = gantry_cli("shell", str(job.pk), url=gantry_server.url, token=viewer_token)
    assert refused.returncode == 5
    assert "job.exec" in refused.stderr and f"job {job.pk}" in refused.stderr
    missing = gantry_cli("exec", "999999", "--", "true", url=gantry_server.url)
    assert missing.returncode == 4 and "No such job" in missing.stderr
    assert Job.objects.get(pk=job.pk).state == "running"
