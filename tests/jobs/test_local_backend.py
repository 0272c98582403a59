"""Jobs that really run: the local backend, real executors, a live server."""

import hashlib
import os
import signal
import textwrap

import pytest

from jobs import tasks
from jobs.compute import reset_backends
from jobs.compute.local import process_start_time
from jobs.models import Artifact, JobWorker, LogChunk, MetricPoint
from jobs.queries import log_lines
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from tests.jobs.conftest import wait_for, wait_until

pytestmark = pytest.mark.slow


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def submit(owner, project, **spec):
    spec.setdefault("name", "test")
    return submit_job(owner, project, **spec)


def test_train_job_runs_to_success_with_logs_metrics_and_an_artifact(
    running_jobs, owner, project, tmp_path
):
    train = script(
        tmp_path,
        "train.py",
        """
        import os, sys
        from executor import log_metric
        assert sys.argv[1:] == ["--epochs", "3", "--fast", "true"], sys.argv
        assert os.environ["GANTRY_PARAM_EPOCHS"] == "3"
        assert os.environ["OMP_NUM_THREADS"] == "1"
        assert "SECRET_KEY" not in os.environ and "GANTRY_JOB_TOKEN" not in os.environ
        for i in range(200):
            print(f"line {i}")
            log_metric("loss", 1.0 / (i + 1), step=i)
        print("to stderr", file=sys.stderr)
        out = os.environ["GANTRY_OUTPUTS_DIR"]
        with open(os.path.join(out, "model.txt"), "w") as fh:
            fh.write("weights")
        """,
    )
    job = submit(owner, project, command=f"python {train}", parameters={"epochs": 3, "fast": True})
    wait_for(job, "succeeded", "failed")
    assert job.state == "succeeded", (
        job.state_reason,
        [line["text"] for line in log_lines(job)][-15:],
    )
    assert job.state_reason == "exited with code 0"
    assert [e.to_state for e in job.events.all()] == [
        "queued",
        "admitted",
        "starting",
        "running",
        "succeeded",
    ]

    wait_until(lambda: MetricPoint.objects.filter(job=job).count() == 200, what="metrics")
    lines = log_lines(job, limit=10_000)
    stdout = [ln["text"] for ln in lines if ln["stream"] == "stdout"]
    assert stdout == [f"line {i}" for i in range(200)]  # in order, exactly once
    seqs = [ln["seq"] for ln in lines]
    assert seqs == sorted(set(seqs))
    assert any(ln["text"] == "to stderr" and ln["stream"] == "stderr" for ln in lines)
    # Stored as batches, not one row per line.
    assert LogChunk.objects.filter(job=job).count() < len(lines)

    artifact = Artifact.objects.get(job=job, path="model.txt")
    assert artifact.file.name == f"jobs/{job.pk}/outputs/model.txt"
    assert artifact.file.read() == b"weights"
    assert artifact.sha256 == hashlib.sha256(b"weights").hexdigest()


def test_failing_command_fails_with_its_exit_code(running_jobs, owner, project):
    job = submit(owner, project, command="python -c 'import sys; print(\"boom\"); sys.exit(3)'")
    wait_for(job, "failed", "succeeded")
    assert job.state == "failed"
    assert job.state_reason == "exited with code 3"
    assert JobWorker.objects.get(job=job).exit_code == 3


def test_timeout_stops_the_job_as_timed_out(running_jobs, owner, project):
    job = submit(
        owner, project, command="python -c 'import time; time.sleep(120)'", timeout_seconds=1
    )
    wait_for(job, "timed_out", "failed", "succeeded")
    assert job.state == "timed_out"
    assert "timed out after 1 s" in job.state_reason


def group_members(pgid):
    """Host pids of the processes in a process group (a sandboxed job's included)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def started(job, name="started"):
    """The job's worker 0 wrote `name` into its working directory (the only place a
    sandboxed job can write)."""
    worker = JobWorker.objects.get(job=job, rank=0)
    return bool(worker.workdir) and os.path.exists(os.path.join(worker.workdir, name))


def test_cancel_kills_the_whole_process_group(running_jobs, owner, project, tmp_path):
    parent = script(
        tmp_path,
        "parent.py",
        """
        import subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        open("started", "w").close()
        time.sleep(300)
        """,
    )
    job = submit(owner, project, command=f"python {parent}")
    wait_for(job, "running")
    wait_until(lambda: started(job), what="the grandchild")
    worker = JobWorker.objects.get(job=job)
    wait_until(lambda: worker.refresh_from_db() or worker.child_pid, what="the child's pid")
    group = group_members(worker.child_pid)
    assert len(group) >= 2  # the command and its grandchild (and the sandbox around them)

    cancel_job(owner, job)
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    wait_for(job, "cancelled", "failed", "succeeded")
    assert job.state == "cancelled"
    assert job.state_reason == f"cancelled by {owner.username}"
    wait_until(
        lambda: all(process_start_time(pid) is None for pid in group),
        what="every process of the group to die",
    )


def test_killed_executor_is_lost_then_retried(running_jobs, owner, project, tmp_path, settings):
    """The retry runs the same command; GANTRY_ATTEMPT tells it which attempt it is."""
    settings.GANTRY_HEARTBEAT_TIMEOUT_SECONDS = 5
    flaky = script(
        tmp_path,
        "flaky.py",
        """
        import os, time
        if os.environ["GANTRY_ATTEMPT"] == "1":
            open("started", "w").close()
            time.sleep(300)
        print("attempt", os.environ["GANTRY_ATTEMPT"])
        """,
    )
    job = submit(owner, project, command=f"python {flaky}", max_retries=1)
    wait_for(job, "running")
    wait_until(lambda: started(job), what="the first attempt")
    worker = JobWorker.objects.get(job=job)
    os.kill(worker.pid, signal.SIGKILL)

    wait_for(job, "succeeded", "failed", "lost", reconcile=True)
    assert job.state == "succeeded", job.state_reason
    assert job.attempt == 2
    retry = job.events.get(to_state="queued", from_state="running")
    assert retry.reason.startswith("attempt 1 lost (")
    assert retry.reason.endswith("; retrying, 2 of 2")
    # The orphaned command of attempt 1 was killed with its lost executor.
    assert process_start_time(worker.child_pid) is None
    assert [ln["text"] for ln in log_lines(job) if ln["stream"] == "stdout"] == ["attempt 2"]


def test_silent_executor_is_lost_after_the_heartbeat_timeout(
    running_jobs, owner, project, settings
):
    settings.GANTRY_HEARTBEAT_TIMEOUT_SECONDS = 3
    job = submit(owner, project, command="python -c 'import time; time.sleep(300)'")
    wait_for(job, "running")
    worker = JobWorker.objects.get(job=job)
    os.kill(worker.pid, signal.SIGSTOP)  # alive, but says nothing
    wait_for(job, "lost", "failed", reconcile=True)
    assert job.state == "lost"
    assert "no heartbeat for" in job.state_reason
    wait_until(lambda: process_start_time(worker.pid) is None, what="the executor to be killed")


def test_running_job_survives_a_platform_restart(running_jobs, owner, project, tmp_path):
    go = tmp_path / "go"
    waiter = script(
        tmp_path,
        "waiter.py",
        f"""
        import os, time
        while not os.path.exists({str(go)!r}):
            time.sleep(0.1)
        print("done")
        """,
    )
    job = submit(owner, project, command=f"python {waiter}")
    wait_for(job, "running")

    reset_backends()  # a new worker process: no Popen objects, nothing in memory
    assert tasks.adopt() == {"adopted": 1}
    job.refresh_from_db()
    assert job.state == "running"

    go.touch()
    wait_for(job, "succeeded", "failed", reconcile=True)
    assert job.state == "succeeded"


def test_adopt_marks_jobs_whose_executor_is_gone_as_lost(running_jobs, owner, project):
    job = submit(owner, project, command="python -c 'import time; time.sleep(300)'")
    wait_for(job, "running")
    worker = JobWorker.objects.get(job=job)
    os.kill(worker.pid, signal.SIGKILL)
    wait_until(lambda: process_start_time(worker.pid) is None, what="the executor to die")

    reset_backends()
    assert tasks.adopt() == {"lost": 1}
    job.refresh_from_db()
    assert job.state == "lost"
    assert "executor was gone when the platform restarted" in job.state_reason


def test_distributed_job_runs_two_ranks_with_the_torchrun_contract(
    running_jobs, owner, project, tmp_path
):
    check = script(
        tmp_path,
        "ddp.py",
        """
        import os
        assert os.environ["WORLD_SIZE"] == "2"
        assert os.environ["RANK"] == os.environ["LOCAL_RANK"] == os.environ["GANTRY_WORKER_RANK"]
        assert os.environ["MASTER_ADDR"] == "127.0.0.1" and int(os.environ["MASTER_PORT"]) > 0
        assert os.environ["PET_NPROC_PER_NODE"] == "2" and os.environ["PET_NNODES"] == "1"
        print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} port {os.environ['MASTER_PORT']}")
        """,
    )
    job = submit(owner, project, kind="distributed", workers=2, command=f"python {check}")
    wait_for(job, "succeeded", "failed")
    assert job.state == "succeeded", job.state_reason
    port = job.placement["master_port"]
    for rank in (0, 1):
        stdout = [ln["text"] for ln in log_lines(job, worker=rank) if ln["stream"] == "stdout"]
        assert stdout == [f"rank {rank} of 2 port {port}"]
    assert set(job.placement["cpus"]["0"]).isdisjoint(job.placement["cpus"]["1"])


def test_job_over_its_memory_limit_is_killed(running_jobs, job_settings, owner, project):
    """Without hard limits (no sandbox: tests/jobs/test_limits.py has the kernel's), the
    reconcile pass watches the resident memory and kills a job over its request."""
    job_settings.GANTRY_SANDBOX = "off"
    hog = "python -c 'import time; x = bytearray(300 * 1024 * 1024); x[::4096] = b\"x\" * len(x[::4096]); time.sleep(300)'"
    job = submit(owner, project, command=hog, memory_mb=100)
    wait_for(job, "failed", "succeeded", reconcile=True)
    assert job.state == "failed"
    assert "exceeded its memory limit of 100 MiB" in job.state_reason
