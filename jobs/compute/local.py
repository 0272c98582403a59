"""The local backend: every worker is an executor process on this machine.

What the operating system enforces and what it does not:

* GPUs: each worker gets `CUDA_VISIBLE_DEVICES` naming the GPUs admission assigned
  to it by UUID (``GPU-…``, from NVML or nvidia-smi; by index where UUIDs are not
  known; an empty value for CPU-only jobs). Sandboxed, only those GPUs' device nodes
  exist for it; unsandboxed, nothing stops a process from resetting the variable.
* Sandboxed where the machine has cgroups (jobs/compute/sandbox.py), each worker's
  command is in a cgroup of its own: memory (the kernel's OOM killer acts in it alone,
  and the job fails "out of memory"), CPU time (its CPUs' worth), processes
  (GANTRY_JOB_MAX_PROCESSES) and, watched by the executor, disk in its workdir
  (GANTRY_JOB_DISK_MB). The executor is pinned with `sched_setaffinity` to as many cores
  as the job asked for, and OMP/MKL/OpenBLAS thread pools are sized to match.
* Without those limits (no sandbox, no cgroups), memory is only watched: `reconcile`
  sums the RSS of the command's process group and kills the job when it exceeds the
  limit, so a brief spike between two checks goes unnoticed.
* Time: the executor enforces `timeout_seconds`; reconcile is a backstop.

Isolation: when this machine can (root, bubblewrap), every worker's command runs in a
sandbox (jobs/compute/sandbox.py decides, executor/sandbox.py wraps): its own uid, mount
and PID namespaces, seeing its workdir, staged inputs, runtime and GPUs only, and a
network namespace per job attempt with loopback only (its workers reach each other and
nothing else). A notebook's JupyterLab listens on a Unix socket in its workdir, which the
notebook origin connects to. The executor stays outside, with the job token and the
shared blob cache. Without a
sandbox, jobs of a second tenant are refused (GANTRY_ALLOW_UNISOLATED_JOBS=true
accepts the risk).

Executors are started detached (own session, output to `executor.log` in the
workdir) so they outlive a restart of the django-q worker; their pid and process
start time (from /proc) let a new worker adopt them without mistaking a
recycled pid for ours.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings

from core.nvml import nvidia_smi_query, nvml_query
from jobs.compute import sandbox
from jobs.compute.base import Backend, Capacity, Gpu, Node, WorkerProbe

logger = logging.getLogger(__name__)

EXECUTOR_PACKAGE = Path(settings.BASE_DIR) / "executor"
# Variables of the platform's environment a job may see; everything else
# (SECRET_KEY, DATABASE_URL, cloud credentials…) stays out of jobs.
# LD_LIBRARY_PATH finds NVML/CUDA where the driver is not in the loader's default path;
# GANTRY_GPU_SAMPLE_SECONDS is the executor's GPU telemetry period (executor/gpu.py).
PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
PASSED_ENV += ("LD_LIBRARY_PATH", "GANTRY_GPU_SAMPLE_SECONDS")
# JupyterLab's socket, relative to the workdir (interactive/proxy.py connects to it).
NOTEBOOK_SOCKET = ".notebook.sock"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


# --- /proc helpers ------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3… of /proc/<pid>/stat (after the command name, which may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except (OSError, ValueError):
        return None
    return data.rsplit(")", 1)[1].split()


def process_start_time(pid: int | None) -> int | None:
    """The process's start time in clock ticks since boot; None if it is gone or a zombie."""
    if not pid:
        return None
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_matches(pid: int | None, start_time: int | None) -> bool:
    return bool(pid) and start_time is not None and process_start_time(pid) == start_time


def process_tree(root: int) -> list[tuple[int, int | None]]:
    """`root` and its descendants, parents first, each with its start time (so a later
    signal never reaches a process that reused the pid)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append((pid, process_start_time(pid)))
        todo += children.get(pid, [])
    return tree


def stop_processes(victims: list[tuple[int, int | None]], grace: float) -> None:
    """SIGTERM each (pid, start time), then SIGKILL what still runs after `grace` seconds."""
    for pid, _ in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(process_matches(*v) for v in victims) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, started in victims:
        if process_matches(pid, started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def group_rss_mb(pgid: int) -> int:
    """Resident memory of every process in a process group, in MiB."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if int(fields[2]) == pgid:
            total += int(fields[21]) * page
    return total // (1024 * 1024)


def _meminfo_mb() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 4096


def _open_log(path: Path):
    """Append to the executor's log in the workdir without following what a sandboxed
    job may have put there (a relaunch after preemption reuses the workdir, which the
    job owns): a symbolic link, a FIFO or another file is replaced by a fresh one."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(3):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1:
            os.set_blocking(fd, True)
            return os.fdopen(fd, "ab")
        os.close(fd)
        path.unlink()
    raise OSError(f"cannot open {path} safely")


# --- GPUs -----------------------------------------------------------------------------


def _gpus_from_nvml() -> tuple[Gpu, ...] | None:
    def gpu(nvml, index: int) -> Gpu:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        memory = nvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
        return Gpu(index=index, name=name, memory_mb=int(memory))

    return nvml_query(lambda nvml: tuple(gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())))


def _gpus_from_nvidia_smi() -> tuple[Gpu, ...]:
    gpus = []
    for parts in nvidia_smi_query("index,name,memory.total") or []:
        if len(parts) >= 3 and parts[0].isdigit():
            memory = parts[2].split()[0] if parts[2] else ""
            gpus.append(Gpu(int(parts[0]), parts[1], int(memory) if memory.isdigit() else 0))
    return tuple(gpus)


def detect_gpus() -> tuple[Gpu, ...]:
    """NVML first (nvidia-ml-py), then nvidia-smi; none found means CPU only."""
    gpus = _gpus_from_nvml()
    return gpus if gpus is not None else _gpus_from_nvidia_smi()


# --- the backend ----------------------------------------------------------------------


class LocalBackend(Backend):
    name = "local"
    where = "on this machine"
    gpu_cache_seconds = 300

    def __init__(self):
        self._lock = threading.Lock()
        self._gpus: tuple[Gpu, ...] | None = None
        self._gpus_at = 0.0
        # Executors this process started: polled so they do not linger as zombies.
        self._children: dict[int, subprocess.Popen] = {}

    # -- capacity ------------------------------------------------------------------
    def gpus(self) -> tuple[Gpu, ...]:
        fake = getattr(settings, "GANTRY_LOCAL_FAKE_GPUS", 0)
        if fake:
            # Test-only (see settings): GPUs that exist for admission's bookkeeping alone.
            return tuple(Gpu(index=i, name="fake GPU (tests)") for i in range(fake))
        with self._lock:
            if self._gpus is None or time.monotonic() - self._gpus_at > self.gpu_cache_seconds:
                self._gpus = detect_gpus()
                self._gpus_at = time.monotonic()
            return self._gpus

    def capacity(self) -> Capacity:
        cpus = settings.GANTRY_LOCAL_CPUS or os.cpu_count() or 1
        memory = settings.GANTRY_LOCAL_MEMORY_MB or _meminfo_mb()
        return Capacity(cpus=cpus, memory_mb=memory, gpus=self.gpus())

    def nodes(self) -> list[Node]:
        """One node: this machine, with the capacity above."""
        capacity = self.capacity()
        models = {gpu.name for gpu in capacity.gpus}
        return [
            Node(
                name=socket.gethostname() or "localhost",
                gpus=capacity.gpu_count,
                cpus=capacity.cpus,
                memory_mb=capacity.memory_mb,
                gpu_model=models.pop() if len(models) == 1 else "",
            )
        ]

    # -- the command a worker runs ---------------------------------------------------
    @staticmethod
    def interpreter(runtime: str) -> str:
        """The Python a job runs under: a virtualenv's bin/python, a given interpreter, or ours."""
        if not runtime:
            return sys.executable
        path = Path(runtime)
        if path.is_dir():
            return str(path / "bin" / "python")
        return str(path)

    @staticmethod
    def runtime_problem(runtime: str) -> str | None:
        """Why `runtime` cannot be used, or None."""
        if not runtime:
            return None
        path = Path(runtime)
        if not path.is_absolute():
            return "Give an absolute path to a Python interpreter or a virtualenv."
        if path.is_dir():
            python = path / "bin" / "python"
            if not (python.is_file() and os.access(python, os.X_OK)):
                return f"{runtime} is a directory without an executable bin/python."
            return None
        if not path.exists():
            return f"{runtime} does not exist on this machine."
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"{runtime} is not an executable file."
        return None

    def command(self, job, worker) -> list[str]:
        from jobs.models import JobKind

        python = self.interpreter(job.runtime)
        if job.kind == JobKind.NOTEBOOK:
            return self.notebook_command(job, worker)
        argv = shlex.split(job.command)
        if argv and argv[0] in ("python", "python3"):
            argv[0] = python
        # Sorted by name: PostgreSQL's jsonb does not keep the order keys were given in,
        # and a job must get the same command line on every database.
        for name, value in sorted(job.parameters.items()):
            if isinstance(value, bool):
                value = "true" if value else "false"
            argv += [f"--{name}", str(value)]
        return argv

    def notebook_command(self, job, worker) -> list[str]:
        return [
            self.interpreter(job.runtime),
            "-m",
            "jupyterlab",
            "--no-browser",
            # A Unix socket in the workdir (the command's working directory, sandboxed or
            # not), not a port: in the job's network namespace a port is out of Gantry's
            # reach, and nothing else may reach it. 0600: its user and root (Gantry) only.
            f"--ServerApp.sock={NOTEBOOK_SOCKET}",
            "--ServerApp.sock_mode=0600",
            # The token comes from JUPYTER_TOKEN (see environment()): argv shows in `ps`.
            f"--ServerApp.base_url=/jobs/{job.pk}/lab/",
            "--ServerApp.root_dir=.",
            "--ServerApp.allow_remote_access=True",
            # No saved notebook is ever trusted (signed): its outputs' scripts never run
            # in another user's browser (executor/notebook_trust.py).
            "--NotebookNotary.db_file=:memory:",
            "--ContentsManager.pre_save_hook=executor.notebook_trust.never_trusted",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ]

    def environment(self, job, worker) -> dict[str, str]:
        """The spec's env for one worker: parameters, thread limits, GPUs, torchrun's contract."""
        env = {str(k): str(v) for k, v in job.env.items()}
        for name, value in job.parameters.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            env["GANTRY_PARAM_" + name.upper().replace("-", "_")] = str(value)
        for var in THREAD_VARS:
            env.setdefault(var, str(job.cpus))
        gpus = (job.placement.get("gpus") or {}).get(str(worker.rank), [])
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_names(list(gpus)))
        env["NVIDIA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"] or "none"
        if job.kind == "notebook":
            env["JUPYTER_TOKEN"] = worker.notebook_token
        if job.kind == "distributed":
            port = str(job.placement.get("master_port", ""))
            n = str(job.workers)
            env.update(
                {
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "WORLD_SIZE": n,
                    "RANK": str(worker.rank),
                    "LOCAL_RANK": str(worker.rank),
                    "LOCAL_WORLD_SIZE": n,
                    "GROUP_RANK": "0",
                    "PET_NNODES": "1",
                    "PET_NPROC_PER_NODE": n,
                    "PET_NODE_RANK": "0",
                    "PET_MASTER_ADDR": "127.0.0.1",
                    "PET_MASTER_PORT": port,
                }
            )
        return env

    def gpu_names(self, indices: list[int]) -> list[str]:
        """How CUDA_VISIBLE_DEVICES names these GPUs: their UUIDs where known (the
        sandbox shows a worker only its GPUs' nodes, so CUDA may number them from 0
        there), else the host's indices. Test GPUs (GANTRY_LOCAL_FAKE_GPUS) have none."""
        if not indices or getattr(settings, "GANTRY_LOCAL_FAKE_GPUS", 0):
            return [str(i) for i in indices]
        uuids = sandbox.gpu_uuids(indices)
        return uuids if uuids else [str(i) for i in indices]

    # -- processes -------------------------------------------------------------------
    def _pythonpath(self) -> Path:
        """A directory holding only `executor` (a symlink to our package), so that
        `from executor import log_metric` works under any runtime without leaking
        the platform's own packages into it."""
        root = Path(settings.GANTRY_JOBS_DIR) / "_pythonpath"
        link = root / "executor"
        if not link.exists():
            root.mkdir(parents=True, exist_ok=True)
            tmp = root / f".executor-{os.getpid()}"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            tmp.symlink_to(EXECUTOR_PACKAGE, target_is_directory=True)
            os.replace(tmp, link)
        return root

    def _cpu_set(self, job, rank: int) -> set[int] | None:
        slots = (job.placement.get("cpus") or {}).get(str(rank))
        try:
            available = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return None
        if not slots or not available:
            return None
        return {available[slot % len(available)] for slot in slots}

    def workdir(self, job, rank: int) -> Path:
        return (
            Path(settings.GANTRY_JOBS_DIR)
            / str(job.pk)
            / f"attempt-{job.attempt}"
            / f"worker-{rank}"
        )

    def submit_problem(self, project) -> str | None:
        """Why a job of `project` may not be submitted here (no sandbox, another tenant)."""
        return sandbox.isolation_refusal(project)

    def launch(self, job, token_for_rank) -> None:
        refusal = sandbox.isolation_refusal(job.project, exclude_job=job)
        if refusal:
            raise RuntimeError(refusal)
        boxed = sandbox.sandbox_status().available
        pythonpath = self._pythonpath()
        base_env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        base_env["PYTHONPATH"] = str(pythonpath)
        netns_fd = netns_name = None
        if boxed:
            self.sweep_namespaces()
            # One network namespace per attempt, shared by its workers: loopback only.
            # The executors inherit it as a descriptor; its name goes once they exist.
            netns_name = sandbox.namespace_name(job.pk, job.attempt)
            try:
                path = sandbox.create_namespace(netns_name, sandbox.sandbox_status().ip)
                netns_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except (sandbox.NamespaceError, OSError, subprocess.SubprocessError) as exc:
                sandbox.delete_namespace(netns_name, sandbox.sandbox_status().ip)
                raise RuntimeError(f"cannot make the job's network namespace: {exc}") from exc
        try:
            self._launch_workers(job, token_for_rank, boxed, base_env, netns_fd)
        finally:
            if netns_fd is not None:
                os.close(netns_fd)
                sandbox.delete_namespace(netns_name, sandbox.sandbox_status().ip)

    def _launch_workers(self, job, token_for_rank, boxed, base_env, netns_fd) -> None:
        from jobs.models import JobKind, JobWorker
        from jobs.services.launch import record_worker_process

        shm = None
        if boxed and job.kind == JobKind.DISTRIBUTED:
            # One /dev/shm for the workers of one gang (NCCL's shared-memory transport).
            shm = Path(settings.GANTRY_JOBS_DIR) / str(job.pk) / f"attempt-{job.attempt}" / "shm"
        for worker in JobWorker.objects.filter(job=job).order_by("rank"):
            workdir = self.workdir(job, worker.rank)
            workdir.mkdir(parents=True, exist_ok=True)
            notebook_token = secrets.token_urlsafe(24) if job.kind == JobKind.NOTEBOOK else None
            env = {
                **base_env,
                "GANTRY_JOB_TOKEN": token_for_rank(worker.rank),
                "GANTRY_FINAL_FLUSH_SECONDS": str(settings.GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS),
                "GANTRY_CACHE_DIR": str(Path(settings.DATA_DIR) / "cache" / "blobs"),
            }
            if boxed:
                gpus = (job.placement.get("gpus") or {}).get(str(worker.rank), [])
                env[sandbox.SPEC_ENV] = sandbox.worker_sandbox(
                    job, self.interpreter(job.runtime), list(gpus), shm, netns_fd
                )
            argv = [
                sys.executable,
                "-m",
                "executor",
                "--api-url",
                settings.GANTRY_URL,
                "--job",
                str(job.pk),
                "--worker",
                str(worker.rank),
                "--workdir",
                str(workdir),
            ]
            with _open_log(workdir / "executor.log") as log:
                proc = subprocess.Popen(
                    argv,
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=() if netns_fd is None else (netns_fd,),
                )
            cpus = self._cpu_set(job, worker.rank)
            if cpus:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(proc.pid, cpus)
            self._children[proc.pid] = proc
            record_worker_process(
                worker,
                pid=proc.pid,
                pid_start_time=process_start_time(proc.pid),
                workdir=str(workdir),
                notebook_token=notebook_token,
            )

    def on_worker_started(self, worker) -> None:
        """The executor reported its command's pid: remember when that process started."""
        worker.child_start_time = process_start_time(worker.child_pid)

    def _reap(self) -> None:
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]

    def _workers(self, job, ranks):
        workers = list(job.worker_set.all())
        return [w for w in workers if ranks is None or w.rank in ranks]

    def _signal(self, job, ranks, sig) -> None:
        self._reap()
        for worker in self._workers(job, ranks):
            executor_alive = process_matches(worker.pid, worker.pid_start_time)
            if executor_alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(worker.pid, sig)
            if sig == signal.SIGKILL or not executor_alive:
                # Without its executor (or when killing outright) the command's
                # process group must be signalled directly: it is its own session.
                self._signal_child_group(worker, sig)

    @staticmethod
    def _signal_child_group(worker, sig) -> None:
        if process_matches(worker.child_pid, worker.child_start_time):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.child_pid, sig)

    def cancel(self, job, ranks=None) -> None:
        # The executor forwards SIGTERM to the command's process group, waits the
        # grace period, then sends SIGKILL.
        self._signal(job, ranks, signal.SIGTERM)

    def kill(self, job, ranks=None) -> None:
        self._signal(job, ranks, signal.SIGKILL)

    @staticmethod
    def sweep_namespaces() -> list[str]:
        """Remove network namespace names a crashed launch left behind (at each launch)."""
        removed = sandbox.sweep_namespaces()
        if removed:
            logger.warning("removed network namespaces left by a crashed launch: %s", removed)
        return removed

    def probe(self, job) -> list[WorkerProbe]:
        self._reap()
        probes = []
        # Where the kernel holds a job to its memory, a sum of RSS (shared pages counted
        # once per process) would only kill jobs that are within it.
        watch_rss = not sandbox.sandbox_status().limits
        for worker in self._workers(job, None):
            if worker.pid is None:
                probes.append(WorkerProbe(worker.rank, alive=False, detail="was never started"))
                continue
            alive = process_matches(worker.pid, worker.pid_start_time)
            rss = None
            if watch_rss and alive and process_matches(worker.child_pid, worker.child_start_time):
                rss = group_rss_mb(worker.child_pid)
            detail = "" if alive else f"executor process {worker.pid} is gone"
            probes.append(WorkerProbe(worker.rank, alive=alive, detail=detail, rss_mb=rss))
        return probes

    def forget(self) -> None:
        """Drop what this process knows about its children (a simulated restart)."""
        self._children.clear()
