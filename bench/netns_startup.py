"""Start-up cost of a local job's network namespace (issue 18).

What a launch adds: `ip netns add` + `ip -n … link set lo up`, opening it, and removing
its name once the executors hold it (jobs/compute/sandbox.py); what each worker's start
adds: nsenter before bwrap (executor/sandbox.py). Measured against the same bwrap
sandbox running `true` without a namespace. Needs root, bubblewrap and iproute2.

Writes bench/results/netns_startup.json (median and 90th percentile, milliseconds).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "40"))
IP, BWRAP, SETPRIV, NSENTER = (shutil.which(n) for n in ("ip", "bwrap", "setpriv", "nsenter"))
SANDBOX = [
    BWRAP, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
    "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64",
    "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--",
    SETPRIV, "--reuid=200000", "--regid=200000", "--clear-groups", "--no-new-privs",
    "/usr/bin/true",
]


def ms(samples: list[float]) -> dict:
    samples = sorted(samples)
    return {
        "median_ms": round(statistics.median(samples) * 1000, 2),
        "p90_ms": round(samples[int(0.9 * (len(samples) - 1))] * 1000, 2),
    }


def make_namespace(i: int) -> int:
    name = f"gantry-bench-{os.getpid()}-{i}"
    subprocess.run([IP, "netns", "add", name], check=True)
    subprocess.run([IP, "-n", name, "link", "set", "lo", "up"], check=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    subprocess.run([IP, "netns", "delete", name], check=True)
    return fd


def main() -> None:
    if os.geteuid() != 0 or not all((IP, BWRAP, SETPRIV, NSENTER)):
        sys.exit("needs root, bubblewrap, setpriv, nsenter and iproute2")
    launch, plain, entered = [], [], []
    for i in range(ROUNDS):
        start = time.perf_counter()
        fd = make_namespace(i)
        launch.append(time.perf_counter() - start)
        try:
            start = time.perf_counter()
            subprocess.run(SANDBOX, check=True)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run(
                [NSENTER, f"--net=/proc/{os.getpid()}/fd/{fd}", "--", *SANDBOX], check=True
            )
            entered.append(time.perf_counter() - start)
        finally:
            os.close(fd)
    result = {
        "rounds": ROUNDS,
        "per_launch_namespace": ms(launch),
        "worker_start_bwrap": ms(plain),
        "worker_start_nsenter_bwrap": ms(entered),
        "cpus": os.cpu_count(),
    }
    out = ROOT / "bench" / "results" / "netns_startup.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
