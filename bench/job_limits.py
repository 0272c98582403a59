"""What a local job's hard limits cost and give (issue 38): executor/cgroups.py, limits.py.

* Start: a worker's sandbox (the bwrap command line the executor builds, running `true`)
  alone, and with its cgroup made, joined and removed around it, side by side in turns
  (median, p99).
* CPU: jobs that each try to take the whole machine (as many spinning processes as it has
  CPUs, their affinity widened to every CPU, as any job may do) on a machine kept busy,
  for SECONDS each way: before (today's affinity pinning alone) and with their cgroups
  (a quota of the job's CPUs, a weight in proportion). Two 1-CPU jobs, and with 4 CPUs or
  more a third job of the remaining CPUs minus 2 trying the same; then the same two jobs
  beside as many unconfined spinners as the machine has CPUs (a busy host, not a job).
  CPU used: the processes' own user + system time, from the kernel (wait4).

Standard library and the executor only; needs root, bubblewrap and cgroups with the memory,
pids and cpu controllers. Writes bench/results/job_limits.json (or --out FILE).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from measure import percentile  # noqa: E402

from executor.cgroups import Cgroups, Limits, probe  # noqa: E402
from executor.sandbox import bwrap_argv, parse_spec  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "40"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "6"))
CPUS = os.cpu_count() or 1
SPIN = """
import os, sys, time
os.sched_setaffinity(0, range(os.cpu_count()))  # a job may widen its own affinity
n, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
kids = []
for _ in range(n - 1):
    pid = os.fork()
    if pid == 0:
        kids = None
        break
    kids.append(pid)
while time.monotonic() < end:
    pass
if kids is None:
    os._exit(0)
for pid in kids:
    os.waitpid(pid, 0)
"""


def stats(samples: list[float]) -> dict:
    return {
        "median_ms": round(percentile(samples, 50) * 1000, 2),
        "p99_ms": round(percentile(samples, 99) * 1000, 2),
    }


def sandbox_argv(workdir: Path) -> list[str]:
    state = workdir / ".gantry"
    state.mkdir(parents=True, exist_ok=True)
    (state / "metrics-w0.jsonl").touch()
    spec = parse_spec(
        json.dumps(
            {
                "bwrap": shutil.which("bwrap"),
                "setpriv": shutil.which("setpriv"),
                "uid": 200_000,
                "gid": 200_000,
                "read_only": [sys.prefix],
            }
        )
    )
    return bwrap_argv(
        spec,
        ["/usr/bin/true"],
        workdir=str(workdir),
        state_dir=str(state),
        metrics_file=str(state / "metrics-w0.jsonl"),
        executor_package=str(ROOT / "executor"),
    )


def start_times() -> dict:
    """The sandbox's start alone and with its cgroup, in turns."""
    plain, limited, make, remove = [], [], [], []
    limits = Limits(1 << 30, 4096, 1.0, 20 << 30)
    with tempfile.TemporaryDirectory() as tmp:
        argv = sandbox_argv(Path(tmp))
        subprocess.run(argv, check=True)  # warm
        for i in range(ROUNDS):
            start = time.perf_counter()
            subprocess.run(argv, check=True)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            box = Cgroups().create(f"bench-{i}-p{os.getpid()}", limits)
            made = time.perf_counter()
            subprocess.run(box.wrap(argv), check=True)
            ran = time.perf_counter()
            box.kill()
            box.remove()
            end = time.perf_counter()
            limited.append(end - start)
            make.append(made - start)
            remove.append(end - ran)
    return {
        "rounds": ROUNDS,
        "sandbox_alone": stats(plain),
        "sandbox_with_cgroup": stats(limited),
        "of_which_cgroup_made": stats(make),
        "of_which_cgroup_removed": stats(remove),
    }


def spin(processes: int, cpu: int | None = None, box=None) -> subprocess.Popen:
    argv = [sys.executable, "-I", "-c", SPIN, str(processes), str(SECONDS)]
    child = subprocess.Popen(box.wrap(argv) if box else argv)
    if cpu is not None:  # today's pinning: the executor's affinity, which the job widens
        os.sched_setaffinity(child.pid, {cpu})
    return child


def cpus_used(children: dict[str, subprocess.Popen]) -> dict[str, float]:
    """CPUs each process tree used over SECONDS (its user + system time, from wait4)."""
    used = {}
    for name, child in children.items():
        _, _, usage = os.wait4(child.pid, 0)
        used[name] = round((usage.ru_utime + usage.ru_stime) / SECONDS, 2)
    return used


def contention(limited: bool, busy_host: bool) -> dict[str, float]:
    jobs = {"job A (1 CPU)": 1, "job B (1 CPU)": 1}
    if CPUS >= 4 and not busy_host:
        jobs[f"job C ({CPUS - 2} CPUs)"] = CPUS - 2
    boxes, children, slot = [], {}, 0
    for name, cpus in jobs.items():
        box = None
        if limited:
            box = Cgroups().create(
                f"bench-{len(boxes)}-p{os.getpid()}", Limits(1 << 30, 4096, cpus)
            )
            boxes.append(box)
        children[name] = spin(CPUS, cpu=None if limited else slot % CPUS, box=box)
        slot += cpus
    if busy_host:
        children["the host's own load"] = spin(CPUS)
    try:
        return cpus_used(children)
    finally:
        for box in boxes:
            box.kill()
            box.remove()


def main() -> None:
    out = ROOT / "bench" / "results" / "job_limits.json"
    if "--out" in sys.argv:
        out = Path(sys.argv[sys.argv.index("--out") + 1])
    found = probe()
    if os.geteuid() != 0 or not shutil.which("bwrap") or not found["kind"]:
        sys.exit(f"needs root, bubblewrap and cgroups with limits ({found['problem']})")
    result = {
        "machine": {"cpus": CPUS, "cgroups": found["kind"], "kernel": os.uname().release},
        "start": start_times(),
        "cpu_seconds": SECONDS,
        "cpus_used_busy_with_jobs": {
            "before (affinity only)": contention(limited=False, busy_host=False),
            "with cgroups": contention(limited=True, busy_host=False),
        },
        "cpus_used_busy_host": {
            "before (affinity only)": contention(limited=False, busy_host=True),
            "with cgroups": contention(limited=True, busy_host=True),
        },
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
