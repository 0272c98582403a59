"""A GPU machine with cgroup v2: a local job's limits and sandbox for real (issue 38).

The machine this project is built on mounts cgroup v1 and has no GPU; production and GPU
machines mount cgroup v2. Run there as root (`python3 bench/limits_gpu_check.py`), this
checks without Django, with the executor and core/nvml.py alone:

1. cgroup v2 (executor/cgroups.py): the files written (memory.max, memory.swap.max,
   memory.oom.group, pids.max, cpu.max, cpu.weight); a process over its memory is killed
   with the rest of its job (memory.oom.group) and counted (memory.events oom_kill);
   forks past pids.max fail with EAGAIN; a file stops just past the disk limit (EFBIG);
   `cgroups.py join` and `cgroups.py run` as Gantry uses them.
2. A sandboxed GPU job (executor/sandbox.py, in its cgroup) given what Gantry gives it:
   its /dev/nvidia<N>, the control nodes and its MIG instances' capability nodes
   (core.nvml.mig_caps), and of /sys the topology and its GPU's PCI folder
   (core.nvml.gpu_sysfs). CUDA (a bf16 matrix product), NVML (its GPU by UUID) and NCCL
   (one rank's all_reduce) run in it; for comparison also with the old /sys (block, bus,
   class, dev, devices) and with the topology alone.

Needs a NVIDIA GPU (else it says so and exits 0: `make bench` runs on machines without),
bubblewrap (BWRAP=path, else bwrap on PATH), setpriv, and a Python with torch and pynvml
(GPU_PYTHON, else python3). Writes bench/results/limits_gpu_check.json (or --out FILE).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.nvml import NVIDIA_PROC, SYS_TOPOLOGY, gpu_sysfs, mig_caps  # noqa: E402
from executor.cgroups import CONTROLLERS, Cgroups, Limits, probe  # noqa: E402
from executor.sandbox import bwrap_argv, parse_spec  # noqa: E402

UID = 200_001
SCRIPT = ROOT / "executor" / "cgroups.py"
SMALL = Limits(memory_bytes=64 << 20, pids=32, cpus=0.5, disk_bytes=8 << 20)
GPU_JOB = r"""
import json, os, time
out = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "cgroup": open("/proc/self/cgroup").read().split()}
out["sys_mounts"] = sorted({l.split()[4] for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/sys")})
out["nvidia_caps"] = sorted(os.listdir("/dev/nvidia-caps")) if os.path.isdir("/dev/nvidia-caps") else None
open("/tmp/x", "w").write("tmp writable")
try:
    import torch
    out["cuda"] = torch.cuda.is_available()
    out["device_count"] = torch.cuda.device_count()
    out["name"] = torch.cuda.get_device_name(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    out["matmul_tflops"] = round(10 * 2 * 8192**3 / (time.perf_counter() - start) / 1e12)
except Exception as exc:
    out["cuda_error"] = repr(exc)[:500]
try:
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(os.environ["CUDA_VISIBLE_DEVICES"])
    out["nvml_uuid"] = pynvml.nvmlDeviceGetUUID(handle)
    out["nvml_memory_used_mb"] = pynvml.nvmlDeviceGetMemoryInfo(handle).used >> 20
    out["nvml_utilization"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
    out["nvml_count"] = pynvml.nvmlDeviceGetCount()
except Exception as exc:
    out["nvml_error"] = repr(exc)[:500]
try:
    import torch, torch.distributed as dist
    dist.init_process_group("nccl", init_method="file:///tmp/nccl-rendezvous", rank=0, world_size=1)
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    out["nccl_all_reduce"] = float(t[0])
    dist.destroy_process_group()
except Exception as exc:
    out["nccl_error"] = repr(exc)[:500]
print("RESULT " + json.dumps(out))
"""


def run_in(box, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = box.wrap([sys.executable, "-I", "-c", code])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def cgroup_checks() -> dict:
    found = probe()
    result: dict = {"probe": found}
    if not found["kind"]:
        return result
    box = Cgroups().create(f"check-p{os.getpid()}", SMALL)
    try:
        result["directories"] = box.directories
        names = "memory.max memory.swap.max memory.oom.group pids.max cpu.max cpu.weight"
        result["written"] = {
            name: Path(d, name).read_text().strip()
            for d in box.directories
            for name in names.split()
            if Path(d, name).exists()
        }
        base = Path(box.directories[0]).parent / "cgroup.subtree_control"
        result["subtree_control_of_base"] = base.read_text().split() if base.exists() else None
        # A job whose child goes over its memory: with memory.oom.group the parent (which
        # only sleeps) goes too, at once.
        group = (
            "import os, time\n"
            "if os.fork() == 0:\n"
            "    x = bytearray(256 << 20); x[::4096] = b'x' * len(x[::4096]); time.sleep(20)\n"
            "time.sleep(20)\n"
        )
        start = time.monotonic()
        done = run_in(box, group)
        result["oom"] = {
            "parent_returncode": done.returncode,
            "seconds": round(time.monotonic() - start, 2),
            "oom_kills": box.oom_kills(),
            "memory.events": [
                line
                for d in box.directories
                if Path(d, "memory.events").exists()
                for line in Path(d, "memory.events").read_text().splitlines()
            ],
        }
        forks = (
            "import errno, os, time\n"
            "n = 0\n"
            "try:\n"
            "    while n < 200:\n"
            "        if os.fork() == 0:\n"
            "            os.closerange(1, 3); time.sleep(5); os._exit(0)\n"
            "        n += 1\n"
            "except OSError as exc:\n"
            "    print(n, errno.errorcode[exc.errno])\n"
        )
        result["pids"] = run_in(box, forks).stdout.strip()
        box.kill()
        with tempfile.TemporaryDirectory() as tmp:
            big = Path(tmp, "big")
            done = run_in(box, f"open({str(big)!r}, 'wb').write(b'x' * (32 << 20))")
            result["file_size"] = {
                "error": done.stderr.strip().splitlines()[-1:],
                "bytes": big.stat().st_size,
                "limit": SMALL.disk_bytes,
            }
        sleeper = subprocess.Popen(box.wrap(["sleep", "20"]))
        time.sleep(0.5)
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
        result["join"] = joined.stdout.strip()
        box.kill()
        sleeper.wait()
    finally:
        box.kill()
        box.remove()
    own = subprocess.run(
        [
            sys.executable,
            "-I",
            str(SCRIPT),
            "run",
            "--name",
            "check-run",
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
            "x = bytearray(256 << 20); x[::4096] = b'x' * len(x[::4096])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    result["run_out_of_memory_exit"] = own.returncode
    result["removed"] = not any(os.path.exists(d) for d in box.directories)
    return result


def gpus() -> list[tuple[str, int, str]]:
    """(bus id, minor, UUID) of each GPU, from the driver's files."""
    found = []
    for info in sorted(Path(NVIDIA_PROC, "gpus").glob("*/information")):
        fields = dict(
            (k.strip(), v.strip())
            for k, _, v in (ln.partition(":") for ln in info.read_text().splitlines())
        )
        found.append((info.parent.name, int(fields["Device Minor"]), fields["GPU UUID"]))
    return found


def gpu_job(python: str, bwrap: str, sys_paths: list[str], minor: int, uuid: str) -> dict:
    prefix = subprocess.run(
        [python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True
    ).stdout.strip()
    devices = [f"/dev/nvidia{minor}"] + [
        n
        for n in (
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset",
        )
        if os.path.exists(n)
    ]
    spec = parse_spec(
        json.dumps(
            {
                "bwrap": bwrap,
                "setpriv": shutil.which("setpriv"),
                "uid": UID,
                "gid": UID,
                "read_only": [] if prefix.startswith("/usr") else [prefix],
                "devices": devices + mig_caps([minor]),
                "sys": sys_paths,
            }
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp, "worker-0")
        state = work / ".gantry"
        state.mkdir(parents=True)
        (state / "metrics-w0.jsonl").touch()
        os.chown(work, UID, UID)
        os.chmod(tmp, 0o755)
        argv = bwrap_argv(
            spec,
            [python, "-c", GPU_JOB],
            workdir=str(work),
            state_dir=str(state),
            metrics_file=str(state / "metrics-w0.jsonl"),
            executor_package=str(ROOT / "executor"),
        )
        box = Cgroups().create(f"check-gpu-p{os.getpid()}", Limits(16 << 30, 4096, 4, 1 << 30))
        env = {
            "PATH": "/usr/local/nvidia/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/job",
            "TMPDIR": "/tmp",
            "CUDA_VISIBLE_DEVICES": uuid,
            "NCCL_DEBUG": "WARN",
            **{k: os.environ[k] for k in ("LD_LIBRARY_PATH",) if k in os.environ},
        }
        start = time.monotonic()
        try:
            done = subprocess.run(
                box.wrap(argv), capture_output=True, text=True, timeout=240, env=env, cwd=work
            )
        finally:
            box.kill()
            box.remove()
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(lines[-1][7:]) if lines else {}
    result.update(
        returncode=done.returncode,
        seconds=round(time.monotonic() - start, 1),
        stderr_tail=done.stderr.strip().splitlines()[-8:],
    )
    return result


def main() -> None:
    out = ROOT / "bench" / "results" / "limits_gpu_check.json"
    if "--out" in sys.argv:
        out = Path(sys.argv[sys.argv.index("--out") + 1])
    found = gpus()
    if not found:
        print(
            "limits_gpu_check: no NVIDIA GPU here (no /proc/driver/nvidia/gpus): nothing to check"
        )
        return
    bwrap = os.environ.get("BWRAP") or shutil.which("bwrap")
    python = os.environ.get("GPU_PYTHON") or shutil.which("python3")
    if os.geteuid() != 0 or not bwrap or not shutil.which("setpriv"):
        sys.exit("limits_gpu_check: needs root, bubblewrap (BWRAP=path) and setpriv")
    bus, minor, uuid = found[0]
    result = {
        "machine": {
            "kernel": os.uname().release,
            "gpu": {"bus": bus, "minor": minor, "uuid": uuid},
        },
        "controllers": list(CONTROLLERS),
        "cgroups": cgroup_checks(),
        "gpu_sysfs": gpu_sysfs([minor]),
        "mig_caps": mig_caps([minor]),
        "sandboxed_gpu_job": {
            "gantry (topology + its PCI folder)": gpu_job(
                python, bwrap, gpu_sysfs([minor]), minor, uuid
            ),
            "topology only": gpu_job(python, bwrap, list(SYS_TOPOLOGY), minor, uuid),
            "old (block, bus, class, dev, devices)": gpu_job(
                python,
                bwrap,
                [f"/sys/{n}" for n in ("block", "bus", "class", "dev", "devices")],
                minor,
                uuid,
            ),
        },
    }
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
