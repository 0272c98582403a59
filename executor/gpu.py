"""GPU telemetry: sample NVML for the GPUs this worker was given and ship the samples as
metrics, beside the job's own.

Every `GANTRY_GPU_SAMPLE_SECONDS` (5 by default; 0 turns sampling off) each GPU named in
the job's `CUDA_VISIBLE_DEVICES` (by UUID or host index) yields up to five points, named
by its position as the job sees it (`gpu0/…` is the job's `cuda:0`):

* `gpu<i>/utilization` - percent of the last sample period a kernel ran (NVML's `gpu`);
* `gpu<i>/memory_used_mb` - MiB used on the device (all processes);
* `gpu<i>/job_memory_mb` - MiB used by this job's processes, where NVML lists them;
* `gpu<i>/power_w` - board power draw in watts;
* `gpu<i>/temperature_c` - core temperature.

A query NVML does not support on a device is left out, not an error. `pynvml`
(nvidia-ml-py) is imported only when present, so the executor keeps running with the
standard library alone: without the binding, the driver, or GPUs nothing is sampled.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

DEFAULT_SAMPLE_SECONDS = 5.0
MIB = 1024 * 1024


def sample_seconds(environ: dict[str, str] | None = None) -> float:
    """The sampling period from GANTRY_GPU_SAMPLE_SECONDS (0 or less: off)."""
    raw = (environ if environ is not None else os.environ).get("GANTRY_GPU_SAMPLE_SECONDS")
    try:
        return float(raw) if raw not in (None, "") else DEFAULT_SAMPLE_SECONDS
    except ValueError:
        return DEFAULT_SAMPLE_SECONDS


def visible_devices(spec_env: dict[str, Any] | None) -> list[str]:
    """The GPUs a worker was given: its spec's CUDA_VISIBLE_DEVICES, else the executor's
    own (a container runtime sets it); empty for a CPU-only job."""
    value = (spec_env or {}).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        value = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [part.strip() for part in str(value).split(",") if part.strip()]


class GpuSampler:
    """A daemon thread sampling NVML; `start()` is False when there is nothing to sample."""

    def __init__(
        self,
        devices: list[str],
        add: Callable[[dict[str, Any]], Any],
        log: Callable[[str], None],
        interval: float,
        job_pids: Callable[[], Iterable[int]] = lambda: (),
    ) -> None:
        self.devices = devices
        self.add = add
        self.log = log
        self.interval = interval
        self.job_pids = job_pids
        self.nvml: Any = None
        self.handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        if not self.devices or self.interval <= 0 or not self._open():
            return False
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None

    def _open(self) -> bool:
        try:
            import pynvml
        except ImportError:
            return False  # the standard-library install: no telemetry, no error
        try:
            pynvml.nvmlInit()
        except Exception:
            return False  # no driver: a machine without GPUs
        self.nvml = pynvml
        handles = []
        for device in self.devices:
            try:
                if device.isdigit():
                    handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(device)))
                else:
                    handles.append(pynvml.nvmlDeviceGetHandleByUUID(device.encode()))
            except Exception as exc:
                self.log(f"GPU telemetry: NVML does not know GPU {device!r} ({exc})")
                handles.append(None)
        if not any(h is not None for h in handles):
            self.stop()
            return False
        self.handles = handles
        self.log(
            f"GPU telemetry: sampling {len(handles)} GPU(s) every {self.interval:g} s through NVML"
        )
        return True

    def _loop(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self.interval):
                return

    def sample_once(self) -> int:
        """One round of samples for every GPU; returns the number of points added."""
        now = time.time()
        pids = set(self.job_pids())
        added = 0
        for position, handle in enumerate(self.handles):
            if handle is None:
                continue
            for field, value in self._read(handle, pids):
                self.add({"name": f"gpu{position}/{field}", "value": value, "step": None, "ts": now})
                added += 1
        return added

    def _read(self, handle: Any, pids: set[int]) -> list[tuple[str, float]]:
        nvml = self.nvml
        queries: list[tuple[str, Callable[[], float]]] = [
            ("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            ("memory_used_mb", lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used // MIB),
            ("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
            (
                "temperature_c",
                lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            ),
        ]
        if pids:
            queries.append(("job_memory_mb", lambda: self._job_memory(handle, pids)))
        values = []
        for field, query in queries:
            try:
                value = query()
            except Exception:
                continue  # not supported on this device (or a passing NVML error)
            if value is not None:
                values.append((field, value))
        return values

    def _job_memory(self, handle: Any, pids: set[int]) -> float | None:
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        mine = [p.usedGpuMemory or 0 for p in procs if p.pid in pids]
        return sum(mine) // MIB if mine else None


def group_pids(pgid: int | None) -> list[int]:
    """Processes of the command's process group (Linux /proc); empty elsewhere."""
    if not pgid:
        return []
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


def start_sampler(
    spec: dict[str, Any],
    add: Callable[[dict[str, Any]], Any],
    log: Callable[[str], None],
    pgid: int | None = None,
) -> GpuSampler | None:
    """Start sampling this worker's GPUs; None where there is nothing to sample."""
    sampler = GpuSampler(
        visible_devices(spec.get("env")),
        add,
        log,
        sample_seconds(),
        lambda: group_pids(pgid),
    )
    return sampler if sampler.start() else None
