"""A job worker's hard limits on their own (executor/cgroups.py, executor/limits.py).

The real tests make cgroups on this machine (as root, v1 or v2: whichever it mounts with
the memory, pids and cpu controllers) and run real processes in them, bounded so that a
failure cannot hurt the machine: 64 MiB of memory, 32 processes, 8 MiB files. The cgroup v2
and systemd tests that this machine cannot run for real check what is written and run:
the v2 one against a fake cgroup root in tmp_path (regular files in place of the
kernel's; the kernel's side of them is checked on a v2 machine by bench/limits_v2_check.py),
the systemd one the systemd-run command line. Jobs limited through Gantry end to end:
tests/jobs/test_limits.py.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from executor import cgroups
from executor.cgroups import Cgroups, CgroupV2, Limits, LimitsError, SystemdScope
from executor.limits import JobLimits, disk_usage
from tests.conftest import service_required

SCRIPT = Path(cgroups.__file__)
SMALL = Limits(memory_bytes=64 << 20, pids=32, cpus=0.5, disk_bytes=8 << 20)


# --- what is written, without a kernel ----------------------------------------------------


def fake_v2(tmp_path, own="/svc/web"):
    """A cgroup2 mount at tmp_path/cg: our cgroup `own` holds a process, its parent none.
    The files the kernel would make at mkdir are made here beforehand (FAKE)."""
    root = tmp_path / "cg"
    for rel, text in {
        "cgroup.controllers": "cpuset cpu io memory pids",
        "svc/cgroup.controllers": "cpu io memory pids",
        "svc/cgroup.subtree_control": "io",
        "svc/cgroup.procs": "",
        "svc/web/cgroup.procs": "4242\n",
        "svc/gantry/cgroup.controllers": "cpu memory pids",
        "svc/gantry/cgroup.subtree_control": "",
        **{
            f"svc/gantry/job-7-w0-p1/{name}": ""
            for name in [
                "cgroup.procs",
                "memory.max",
                "memory.swap.max",
                "memory.oom.group",
                "pids.max",
                "cpu.max",
                "cpu.weight",
                "memory.events",
            ]
        },
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    mountinfo = f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    return root, Cgroups(mountinfo, f"0::{own}\n")


def test_v2_jobs_go_beside_our_cgroup_with_the_controllers_enabled_and_the_limits_written(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(cgroups, "systemd_run", lambda: None)
    root, found = fake_v2(tmp_path)
    limits = Limits(memory_bytes=128 << 20, pids=64, cpus=1.5, disk_bytes=64 << 20)
    box = found.create("job-7-w0-p1", limits)
    assert isinstance(box, CgroupV2)
    job = root / "svc/gantry/job-7-w0-p1"
    assert box.directories == [str(job)]
    # Our own cgroup holds a process ("no internal processes"): the jobs go under its
    # parent, which hands memory, pids and cpu down to `gantry` and `gantry` to them.
    assert (root / "svc/cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (root / "svc/gantry/cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert {f.name: f.read_text() for f in job.iterdir() if f.read_text()} == {
        "memory.max": str(128 << 20),
        "memory.swap.max": "0",
        "memory.oom.group": "1",  # the whole job at once, never the executor
        "pids.max": "64",
        "cpu.max": "150000 100000",  # 1.5 CPUs' worth of every 100 ms
        "cpu.weight": "150",  # and under contention, 1.5 times a 1-CPU job's share
    }
    # The command writes itself into cgroup.procs, with RLIMIT_FSIZE, then execs.
    argv = box.wrap(["python", "train.py"])
    assert argv[:2] == ["/bin/sh", "-c"] and f"ulimit -f {(64 << 20) // 512 + 1}" in argv[2]
    assert argv[3:] == ["gantry-limits", f"{job}/cgroup.procs", "--", "python", "train.py"]
    (job / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    assert box.oom_kills() == 1


def test_v2_says_in_plain_words_which_controller_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroups, "systemd_run", lambda: None)
    root, found = fake_v2(tmp_path)
    (root / "svc/cgroup.controllers").write_text("io memory")  # no pids, no cpu
    with pytest.raises(LimitsError, match=r"svc is not given the pids, cpu controller"):
        found.create("job-7-w0-p1", SMALL)


def test_a_machine_without_the_controllers_is_told_what_it_has(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroups, "systemd_run", lambda: None)
    (tmp_path / "cgroup.controllers").write_text("hugetlb")
    mountinfo = f"41 31 0:38 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    with pytest.raises(LimitsError, match=r"no cgroup hierarchy .* offers only: hugetlb"):
        Cgroups(mountinfo, "0::/\n").create("job-1-w0-p1", SMALL)


def test_v1_hierarchies_are_read_from_mountinfo_as_this_machine_writes_it():
    mountinfo = (
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
        "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
        r"50 31 0:40 /lab /mnt/cg\040v1 rw - cgroup cgroup rw,freezer"
        "\n"
    )
    found = Cgroups(mountinfo, "4:memory:/api/x\n2:cpu,cpuacct:/\n8:pids:/\n0::/\n")
    v1 = found.v1()
    assert v1["cpu"].mount == "/sys/fs/cgroup/cpu,cpuacct"
    assert v1["cpu"].controllers == {"cpu", "cpuacct"}
    assert v1["memory"].directory(found.own["memory"]) == "/sys/fs/cgroup/memory/api/x"
    freezer = found.hierarchies[-1]
    assert (freezer.mount, freezer.root) == ("/mnt/cg v1", "/lab")
    assert freezer.directory("/lab/job") == "/mnt/cg v1/job"
    with pytest.raises(LimitsError):
        freezer.directory("/elsewhere")


def test_under_systemd_the_limits_are_the_scopes_properties(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroups, "systemd_run", lambda: "/usr/bin/systemd-run")
    _, found = fake_v2(tmp_path)
    box = found.create("job-7-w0-p1", Limits(128 << 20, 64, 2, 64 << 20))
    assert isinstance(box, SystemdScope)
    argv = box.wrap(["python", "train.py"])
    run = argv[: argv.index("--")]
    assert run == [
        "/usr/bin/systemd-run",
        "--scope",
        "--quiet",
        "--unit=job-7-w0-p1.scope",
        "--slice=gantry.slice",
        f"--property=MemoryMax={128 << 20}",
        "--property=MemorySwapMax=0",
        "--property=TasksMax=64",
        "--property=CPUQuota=200%",
        "--property=CPUWeight=200",
    ]
    shell = argv[argv.index("--") + 1 :]
    assert shell[:2] == ["/bin/sh", "-c"] and "ulimit -f" in shell[2]
    assert shell[3:] == ["gantry-limits", "--", "python", "train.py"]  # systemd-run joins
    assert box.directories == [str(tmp_path / "cg/gantry.slice/job-7-w0-p1.scope")]


def test_the_spec_limits_are_checked():
    assert Limits.parse({"memory_bytes": 1 << 30, "pids": 64, "cpus": 2}).disk_bytes is None
    for bad in (
        {"memory_bytes": 10, "pids": 64, "cpus": 1},
        {"memory_bytes": 1 << 30, "pids": True, "cpus": 1},
        {"memory_bytes": 1 << 30, "pids": 64, "cpus": 0},
        {"memory_bytes": 1 << 30, "pids": 64, "cpus": 1, "disk_bytes": "1G"},
        [],
    ):
        with pytest.raises(ValueError):
            Limits.parse(bad)


def test_the_disk_counts_the_jobs_own_files_once_and_never_follows_a_link(tmp_path):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "weights.bin").write_bytes(os.urandom(1 << 20))
    os.link(work / "sub" / "weights.bin", work / "again.bin")  # one inode: counted once
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(os.urandom(4 << 20))
    (work / "link").symlink_to(outside)  # a link to a folder is not entered
    (work / "filelink").symlink_to(outside / "big.bin")
    for i in range(10):
        (work / f"empty-{i}").touch()  # each at least one block
    used = disk_usage(str(work), os.getuid())
    assert (1 << 20) <= used < (1 << 20) + 20 * 4096 + 65536
    assert disk_usage(str(work), os.getuid() + 1) == 0  # nobody else's files count


def test_the_disk_scan_never_opens_what_a_folder_swapped_for_a_link_points_at(tmp_path):
    # The scan runs as root every second while the job can swap a folder for a link
    # (renameat2 RENAME_EXCHANGE in a loop, a real racing process). os.fwalk opened the
    # subfolder by name without O_NOFOLLOW: through a link to a FIFO that open blocks
    # for good (here: the scan never returns); to a device it would open the device.
    import threading

    from tests.executor.test_root_side_files import SWAPPER

    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    (work / "d" / "f.bin").write_bytes(b"x" * 100)
    os.mkfifo(tmp_path / "fifo")
    (work / "l").symlink_to(tmp_path / "fifo")
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(work / "d"), str(work / "l"), "3"],
        stdout=subprocess.PIPE, text=True,
    )
    scans = []

    def scan_while_swapping():
        while swapper.poll() is None:
            scans.append(disk_usage(str(work), None))

    try:
        assert swapper.stdout.readline().strip() == "ready"
        scanner = threading.Thread(target=scan_while_swapping, daemon=True)
        scanner.start()
        swapper.wait(timeout=60)
        scanner.join(timeout=60)  # bounded: a scan blocked on the FIFO never returns
        blocked = scanner.is_alive()
    finally:
        swapper.kill()
        swapper.wait()
        if blocked:  # let the blocked open go, so the thread ends
            with contextlib.suppress(OSError):
                os.close(os.open(tmp_path / "fifo", os.O_WRONLY | os.O_NONBLOCK))
    assert not blocked, "the disk scan opened the FIFO through the job's link"
    assert len(scans) > 10


# --- real cgroups on this machine ---------------------------------------------------------


@pytest.fixture
def real_cgroups():
    found = json.loads(
        subprocess.run(
            [sys.executable, "-I", str(SCRIPT), "probe"], capture_output=True, text=True, timeout=60
        ).stdout
    )
    service_required(f"cgroups with limits ({found['problem']})", bool(found["kind"]))
    return found["kind"]


def run_in(box, code, timeout=60):
    argv = box.wrap([sys.executable, "-I", "-c", code])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_a_process_over_its_memory_is_killed_alone_and_counted(real_cgroups):
    box = Cgroups().create(f"test-oom-p{os.getpid()}", SMALL)
    try:
        done = run_in(box, "x = bytearray(256 << 20); x[::4096] = b'x' * len(x[::4096])")
        assert done.returncode == -9, done  # SIGKILL by the kernel's OOM killer
        assert box.oom_kills() >= 1
    finally:
        box.kill()
        box.remove()
    assert not any(os.path.exists(d) for d in box.directories)
    # We were never in it, and are alive.
    assert "test-oom" not in Path("/proc/self/cgroup").read_text()


def test_forks_past_the_process_limit_fail_with_eagain(real_cgroups):
    box = Cgroups().create(f"test-pids-p{os.getpid()}", SMALL)
    code = (
        "import errno, os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 200:\n"
        "        if os.fork() == 0:\n"
        "            os.closerange(1, 3); time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as exc:\n"
        "    print(n, errno.errorcode[exc.errno])\n"
    )
    try:
        done = run_in(box, code)
        forked, error = done.stdout.split()
        assert error == "EAGAIN" and int(forked) < 32, done
        assert len(box.processes()) == int(forked)  # the children, held in it
    finally:
        box.kill()
        box.remove()


def test_one_file_stops_just_past_the_disk_limit(real_cgroups, tmp_path):
    box = Cgroups().create(f"test-fsize-p{os.getpid()}", SMALL)
    target = tmp_path / "big"
    try:
        done = run_in(box, f"open({str(target)!r}, 'wb').write(b'x' * (32 << 20))")
    finally:
        box.kill()
        box.remove()
    assert "File too large" in done.stderr
    assert (8 << 20) < target.stat().st_size <= (8 << 20) + 512


def test_the_disk_watch_stops_a_job_writing_past_its_limit(real_cgroups, tmp_path):
    from executor import limits

    work = tmp_path / "work"
    work.mkdir()
    box = Cgroups().create(f"test-disk-p{os.getpid()}", SMALL)
    guard = JobLimits(box, os.getuid(), [str(work)])
    writer = (
        "import time\n"
        "for i in range(64):  # 64 MiB at most, whatever happens\n"
        f"    open({str(work)!r} + f'/part-{{i}}', 'wb').write(b'x' * (1 << 20))\n"
        "    time.sleep(0.05)\n"
    )
    limits.DISK_SCAN_SECONDS, before = 0.2, limits.DISK_SCAN_SECONDS
    try:
        child = subprocess.Popen(box.wrap([sys.executable, "-I", "-c", writer]))
        guard.watch()
        returncode = child.wait(timeout=60)
    finally:
        limits.DISK_SCAN_SECONDS = before
        guard.stop()
    assert returncode == -9  # stopped, not finished
    written = sum(f.stat().st_size for f in work.iterdir())
    assert (8 << 20) < written < (64 << 20)
    reason = guard.verdict(returncode)
    assert reason.startswith("disk limit exceeded: the job's files took ")
    assert "over its limit of 8.0 MiB; the job was stopped" in reason
    assert not any(os.path.exists(d) for d in box.directories)


def test_a_cgroups_cpu_is_its_quota(real_cgroups):
    box = Cgroups().create(f"test-cpu-p{os.getpid()}", SMALL)
    try:
        quotas = [
            Path(d, name).read_text().split()[0]
            for d in box.directories
            for name in ("cpu.max", "cpu.cfs_quota_us")
            if Path(d, name).exists()
        ]
    finally:
        box.remove()
    assert quotas == ["50000"]  # half a CPU of every 100 ms (the measurement: bench/)


def test_gantry_runs_a_command_in_a_jobs_cgroup_or_in_one_of_its_own(real_cgroups):
    box = Cgroups().create(f"test-join-p{os.getpid()}", SMALL)
    sleeper = subprocess.Popen(box.wrap(["sleep", "30"]))
    try:
        for _ in range(100):
            if box.processes():
                break
            time.sleep(0.02)
        joined = subprocess.run(
            [
                sys.executable,
                "-I",
                str(SCRIPT),
                "join",
                str(sleeper.pid),
                "--",
                "cat",
                "/proc/self/cgroup",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert joined.returncode == 0, joined.stderr
        assert f"/gantry/test-join-p{os.getpid()}" in joined.stdout
    finally:
        box.kill()
        sleeper.wait()
        box.remove()

    hog = "x = bytearray(256 << 20); x[::4096] = b'x' * len(x[::4096])"
    own = subprocess.run(
        [
            sys.executable,
            "-I",
            str(SCRIPT),
            "run",
            "--name",
            f"test-run-p{os.getpid()}",
            "--memory-bytes",
            str(64 << 20),
            "--pids",
            "32",
            "--cpus",
            "1",
            "--",
            sys.executable,
            "-I",
            "-c",
            f"print(open('/proc/self/cgroup').read(), flush=True); {hog}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert own.returncode == 137, own.stderr  # out of memory, inside its own cgroup
    assert f"/gantry/test-run-p{os.getpid()}-p" in own.stdout  # -p: the runner's pid
    # Removed with it; and we were in neither.
    for d in box.directories:
        assert not list(Path(d).parent.glob(f"test-run-p{os.getpid()}-p*"))
    assert Cgroups().of_process(os.getpid()) == []
