"""NVML (nvidia-ml-py) asked about this machine's GPUs, one session per question; and the
driver's own files (/proc/driver/nvidia) about what a job given some GPUs must see of
the host (jobs/compute/sandbox.py). Standard library only: bench/limits_gpu_check.py
runs it on a GPU machine without Django."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


def nvml_query(question: Callable[[object], T]) -> T | None:
    """`question(pynvml)` inside an initialised NVML session, or None where there is no
    NVML (no binding, no driver) or it fails; the session is always shut down."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None  # no driver: a machine without GPUs, not an error
    try:
        return question(pynvml)
    except Exception as exc:
        logger.warning("NVML failed: %s", exc)
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvidia_smi_query(fields: str) -> list[list[str]] | None:
    """Rows of `nvidia-smi --query-gpu=<fields>` (CSV, no header, no units), each split
    and stripped; None where nvidia-smi is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[part.strip() for part in line.split(",")] for line in out.splitlines()]


# The driver's view of each GPU (information: its bus id and minor) and of its capabilities
# (MIG instances' access files name their /dev/nvidia-caps node by minor).
NVIDIA_PROC = "/proc/driver/nvidia"


def _driver_fields(path: Path) -> dict[str, str]:
    """The `Key: value` lines of a /proc/driver/nvidia file ({} when unreadable)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


def mig_caps(minors: list[int], dev: str = "/dev", proc: str = NVIDIA_PROC) -> list[str]:
    """/dev/nvidia-caps/nvidia-cap<N> of the MIG instances on these GPUs (each GPU
    instance's and compute instance's ``access`` file names N): what CUDA needs to use
    them. Never MIG's ``config`` (reconfigures the GPU) or ``monitor`` (sees every
    instance) capability, nor other GPUs' instances."""
    nodes = []
    for minor in minors:
        mig = Path(proc) / "capabilities" / f"gpu{minor}" / "mig"
        for access in sorted([*mig.glob("gi*/access"), *mig.glob("gi*/ci*/access")]):
            cap = _driver_fields(access).get("DeviceFileMinor", "")
            if cap.isdigit():
                nodes.append(f"{dev}/nvidia-caps/nvidia-cap{cap}")
    return nodes


# Always shown (read-only): the CPU and NUMA topology thread pools, CUDA and NVML read.
SYS_TOPOLOGY = ["/sys/devices/system/cpu", "/sys/devices/system/node"]


def gpu_sysfs(minors: list[int], sysfs: str = "/sys", proc: str = NVIDIA_PROC) -> list[str]:
    """What of /sys a worker with these GPUs sees: the topology, and each GPU's PCI
    device folder (its NUMA node, local CPUs, link: what CUDA and NVML read) with the
    /sys/bus/pci/devices link to it; none of the machine's other devices."""
    paths = list(SYS_TOPOLOGY)
    for info in sorted(Path(proc, "gpus").glob("*/information")):
        minor = _driver_fields(info).get("Device Minor", "")
        if not (minor.isdigit() and int(minor) in minors):
            continue
        link = f"{sysfs}/bus/pci/devices/{info.parent.name}"
        if os.path.islink(link):
            paths += [os.path.realpath(link), link]  # the folder, then the link to it
    return paths
