"""Sandboxed local jobs are held to hard limits and see nothing of the host they need not
(issue 38), end to end: a live server, real executors, bubblewrap and the cgroups of this
machine (executor/cgroups.py picks v2, v1 or a systemd scope).

Every job here is bounded so that a failure cannot hurt the machine: 64 MiB of memory,
64 processes, 64 MiB of disk, and scripts that stop themselves at a few times that.
"""

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import httpx
import pytest

from interactive import tensorboard, terminal
from jobs.compute import sandbox
from jobs.compute.local import process_matches
from jobs.models import JobWorker
from jobs.queries import log_lines
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from tests.conftest import service_required
from tests.jobs.conftest import wait_for, wait_until

pytestmark = pytest.mark.slow

WAITER = "import os, time\nopen('ready', 'w').close()\ntime.sleep(600)\n"


@pytest.fixture
def limited(job_settings, tmp_path):
    status = sandbox.sandbox_status()
    service_required(f"the job sandbox ({status.reason})", status.available)
    service_required(f"cgroups with limits ({status.limits_problem})", bool(status.limits))
    # Gantry's data directory beside the test's files, which jobs may read.
    data = tmp_path.parent / f"{tmp_path.name}-data"
    data.mkdir(parents=True, exist_ok=True)
    job_settings.DATA_DIR = data
    job_settings.GANTRY_JOB_DISK_MB = 64
    yield job_settings
    shutil.rmtree(data / "jobs", ignore_errors=True)  # what the disk test wrote


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def stdout_of(job):
    return [ln["text"] for ln in log_lines(job) if ln["stream"] == "stdout"]


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


def test_a_job_over_its_memory_is_killed_alone_out_of_memory_and_gantry_serves_on(
    limited, running_jobs, owner, project, outsider, other_project, tmp_path
):
    neighbour = submit_job(
        outsider, other_project, name="n", command=f"python {script(tmp_path, 'w.py', WAITER)}"
    )
    neighbour_worker = started(neighbour)
    hog = script(
        tmp_path,
        "hog.py",
        """
        blocks = []
        for _ in range(16):  # 256 MiB at most, in 16 MiB steps
            block = bytearray(16 << 20)
            block[::4096] = b"x" * len(block[::4096])  # touched: really resident
            blocks.append(block)
        print("survived")
        """,
    )
    job = submit_job(owner, project, name="hog", command=f"python {hog}", memory_mb=64)
    wait_for(job, "failed", "succeeded")
    assert job.state == "failed"
    assert job.state_reason.startswith(
        "out of memory: the job went over its memory limit of 64.0 MiB and the kernel killed it"
    ), job.state_reason
    assert "survived" not in stdout_of(job)
    # The executor, outside the job's cgroup, lived to report it.
    worker = JobWorker.objects.get(job=job, rank=0)
    assert worker.state == "failed" and worker.reason.startswith("out of memory")
    # The other tenant's job runs on, and Gantry serves and runs jobs.
    neighbour_worker.refresh_from_db()
    assert process_matches(neighbour_worker.child_pid, neighbour_worker.child_start_time)
    assert httpx.get(running_jobs.url + "/accounts/login/", timeout=30).status_code == 200
    after = submit_job(owner, project, name="after", command="python -c \"print('fine')\"")
    wait_for(after, "succeeded", "failed")
    assert after.state == "succeeded" and stdout_of(after) == ["fine"]
    cancel_job(outsider, neighbour)
    wait_for(neighbour, "cancelled")


def test_a_job_forking_past_its_process_limit_gets_eagain(
    limited, running_jobs, owner, project, tmp_path
):
    limited.GANTRY_JOB_MAX_PROCESSES = 64
    forker = script(
        tmp_path,
        "fork.py",
        """
        import errno, os, time
        n = 0
        try:
            while n < 500:  # a bound of its own, should the limit not hold
                if os.fork() == 0:
                    os.closerange(1, 3)
                    time.sleep(60)
                    os._exit(0)
                n += 1
        except OSError as exc:
            print("stopped after", n, "forks:", errno.errorcode[exc.errno])
        """,
    )
    job = submit_job(owner, project, name="forks", command=f"python {forker}")
    wait_for(job, "succeeded", "failed")
    assert job.state == "succeeded", job.state_reason
    assert len(stdout_of(job)) == 1, [ln["text"] for ln in log_lines(job)]
    [line] = stdout_of(job)
    assert line.endswith("forks: EAGAIN"), line
    assert int(line.split()[2]) < 64


def test_a_job_writing_past_its_disk_limit_is_stopped_with_the_reason(
    limited, running_jobs, owner, project, tmp_path
):
    writer = script(
        tmp_path,
        "fill.py",
        """
        import time
        for i in range(256):  # 256 MiB at most, should the limit not hold
            with open(f"part-{i}", "wb") as fh:
                fh.write(b"x" * (1 << 20))
            time.sleep(0.02)
        print("wrote everything")
        """,
    )
    job = submit_job(owner, project, name="fill", command=f"python {writer}")
    wait_for(job, "failed", "succeeded")
    assert job.state == "failed"
    assert job.state_reason.startswith("disk limit exceeded: the job's files took "), (
        job.state_reason
    )
    assert job.state_reason.endswith("over its limit of 64.0 MiB; the job was stopped")
    assert "wrote everything" not in stdout_of(job)
    workdir = Path(JobWorker.objects.get(job=job, rank=0).workdir)
    written = sum(p.stat().st_size for p in workdir.glob("part-*"))
    assert 64 << 20 < written < 256 << 20


def test_a_job_has_a_writable_tmp_of_its_own_and_joblib_works_in_parallel(
    limited, running_jobs, owner, project, tmp_path
):
    check = script(
        tmp_path,
        "tmp.py",
        """
        import os, tempfile, warnings
        warnings.simplefilter("error")  # joblib's "operate in serial mode" fails the job
        print("TMPDIR", os.environ["TMPDIR"], oct(os.stat("/tmp").st_mode & 0o7777))
        for folder in ("/tmp", "/dev/shm", tempfile.gettempdir()):
            with tempfile.NamedTemporaryFile(dir=folder) as fh:
                fh.write(b"x")
        import numpy as np
        from joblib import Parallel, delayed
        arrays = [np.ones(100_000)] * 4  # over max_nbytes: memory-mapped through a temp folder
        sums = Parallel(n_jobs=2, max_nbytes="1K")(delayed(np.sum)(a) for a in arrays)
        print("sums", [float(s) for s in sums])
        """,
    )
    job = submit_job(owner, project, name="tmp", command=f"python {check}", cpus=2)
    wait_for(job, "succeeded", "failed")
    lines = [(ln["stream"], ln["text"]) for ln in log_lines(job)]
    assert job.state == "succeeded", (job.state_reason, lines[-10:])
    assert stdout_of(job) == ["TMPDIR /tmp 0o1777", "sums [100000.0, 100000.0, 100000.0, 100000.0]"]
    assert not [text for stream, text in lines if stream == "stderr"]


def test_a_jobs_mountinfo_and_sys_show_no_other_job_no_gantry_data_and_no_host_devices(
    limited, running_jobs, owner, project, outsider, other_project, tmp_path
):
    other = submit_job(
        outsider, other_project, name="o", command=f"python {script(tmp_path, 'w.py', WAITER)}"
    )
    other_worker = started(other)
    look = script(
        tmp_path,
        "look.py",
        """
        import json, os
        print(json.dumps({
            "mountinfo": open("/proc/self/mountinfo").read().splitlines(),
            "cgroup": open("/proc/self/cgroup").read().splitlines(),
            "sys": sorted(os.listdir("/sys")),
        }))
        """,
    )
    job = submit_job(owner, project, name="look", command=f"python {look}")
    wait_for(job, "succeeded", "failed")
    assert job.state == "succeeded", job.state_reason
    seen = json.loads("".join(stdout_of(job)))
    own = JobWorker.objects.get(job=job, rank=0).workdir
    data = str(limited.DATA_DIR)
    roots = {line.split()[3]: line.split()[4] for line in seen["mountinfo"]}  # source: target
    # Nothing of another job or of Gantry's data directory but its own working directory
    # (the kernel shows where a bind mount comes from: see the README's Isolation).
    assert not [line for line in seen["mountinfo"] if other_worker.workdir in line]
    assert not [line for line in seen["mountinfo"] if str(other.pk) + "/attempt" in line]
    assert [s for s in roots if data in s and not s.startswith(own)] == []
    # Of /sys, the CPU and NUMA topology only: no block devices, buses, classes, PCI.
    assert sorted(t for t in roots.values() if t.startswith("/sys")) == [
        "/sys/devices/system/cpu",
        "/sys/devices/system/node",
    ]
    assert seen["sys"] == ["devices"]
    # Its own cgroup namespace: the host's cgroup tree does not show.
    assert all(line.endswith(":/") for line in seen["cgroup"]), seen["cgroup"]
    cancel_job(outsider, other)
    wait_for(other, "cancelled")


def test_a_running_jobs_cgroup_holds_its_request_and_its_terminals_and_tensorboard_join_it(
    limited, running_jobs, owner, project, tmp_path
):
    job = submit_job(
        owner,
        project,
        name="w",
        command=f"python {script(tmp_path, 'w.py', WAITER)}",
        cpus=2,
        memory_mb=256,
    )
    worker = started(job)
    # Seen from outside: the command is in a cgroup of its own with the job's request.
    from executor.cgroups import Cgroups

    directories = Cgroups().of_process(worker.child_pid)
    assert directories and all("/gantry/job-" in d for d in directories)
    values = {
        name: Path(d, name).read_text().strip()
        for d in directories
        for name in (
            "memory.max",
            "memory.limit_in_bytes",
            "pids.max",
            "cpu.max",
            "cpu.cfs_quota_us",
        )
        if Path(d, name).exists()
    }
    memory = values.get("memory.max") or values["memory.limit_in_bytes"]
    assert int(memory) == 256 << 20
    assert values["pids.max"] == str(limited.GANTRY_JOB_MAX_PROCESSES)
    assert (values.get("cpu.max") or values["cpu.cfs_quota_us"]).split()[0] == "200000"
    # A terminal's shell enters the job's cgroup too: at its namespace's root, "/".
    session = terminal.LocalSession(job, worker, ["cat", "/proc/self/cgroup"])
    argv, env, cwd = session.argv_and_env()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(line.endswith(":/") for line in lines), lines
    # The job's TensorBoard joins it while it runs; once it ended, gets the job's limits.
    running = tensorboard.limited(job, ["tensorboard"])
    assert running[2:] == [str(sandbox.CGROUPS_SCRIPT), "join", str(worker.child_pid), "--"] + [
        "tensorboard"
    ]
    cancel_job(owner, job)
    wait_for(job, "cancelled")
    after = tensorboard.limited(job, ["tensorboard"])
    assert after[2:5] == [str(sandbox.CGROUPS_SCRIPT), "run", "--name"]
    assert after[after.index("--memory-bytes") + 1] == str(256 << 20)
    assert after[after.index("--cpus") + 1] == "2"
