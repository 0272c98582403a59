"""Whether local jobs can be sandboxed here, and the sandbox each worker gets.

The executor (executor/sandbox.py) does the wrapping; this module decides whether it
can, what a worker may see (its runtime, the configured read-only paths, its GPUs),
which user it runs as, and what Gantry does when there is no sandbox: a warning at
start-up and on the cluster page, and jobs of one tenant only unless
GANTRY_ALLOW_UNISOLATED_JOBS=true.

Network: each launch of a job attempt gets a network namespace of its own
(``ip netns add gantry-job-<id>-<attempt>-<random>``) with only loopback up, shared by
its workers (torchrun rendezvous on 127.0.0.1) and by nothing else: no route to the
host's loopback services (PostgreSQL, Redis, Gantry), other jobs, or outside. The
executors stay in the host's namespace (they talk to Gantry) and inherit the namespace
as an open descriptor; only the sandboxed command enters it. Its name is removed as soon
as the executors are started, so the namespace ends with the last of the attempt's
processes, whatever becomes of Gantry's worker meanwhile; a name left by a launch that
crashed half-way is found by its prefix and removed (:func:`sweep_namespaces`).

Limits: each worker's command runs in a cgroup of its own (executor/limits.py and
executor/cgroups.py make it), held to the job's memory and CPUs, GANTRY_JOB_MAX_PROCESSES
processes and GANTRY_JOB_DISK_MB of disk in its working directory. Gantry asks at start-up
whether this machine can (``cgroups.py probe``: systemd scope, cgroup v2 or v1), puts the
limits in the worker's spec when it can, and says so in plain words when it cannot. A
terminal and a running job's TensorBoard join the command's cgroup (``cgroups.py join``);
a finished job's TensorBoard gets one of its own with the job's limits (``cgroups.py run``).

What of the host a job sees beyond its files: of /sys the CPU and NUMA topology and its
GPUs' PCI device folders; of /dev/nvidia-caps the nodes of its GPUs' MIG instances only,
never MIG's config or monitor capabilities (core/nvml.py reads the driver's files).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core import checks

from core.nvml import NVIDIA_PROC, gpu_sysfs, mig_caps, nvidia_smi_query, nvml_query

SPEC_ENV = "GANTRY_SANDBOX"  # read by the executor: executor/sandbox.py
PROBE_UID = 65534  # nobody: the probe only checks that a uid can be dropped to


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    reason: str  # why not, in plain words ("" when available)
    bwrap: str = ""
    setpriv: str = ""
    ip: str = ""
    nsenter: str = ""
    limits: str = ""  # how jobs' hard limits are set here ("cgroup v2"…); "" when they cannot be
    limits_problem: str = ""  # why not, in plain words


@functools.lru_cache(maxsize=4)
def _probe(mode: str) -> SandboxStatus:
    if mode == "off":
        return SandboxStatus(False, "the sandbox is turned off (GANTRY_SANDBOX=off)")
    if os.geteuid() != 0:
        return SandboxStatus(
            False,
            "Gantry does not run as root, so it cannot give each job a user of its own",
        )
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if not bwrap:
        return SandboxStatus(False, "bubblewrap (bwrap) is not installed")
    if not setpriv:
        return SandboxStatus(False, "setpriv (util-linux) is not installed")
    ip, nsenter = shutil.which("ip"), shutil.which("nsenter")
    if not ip:
        return SandboxStatus(
            False, "iproute2 (ip) is not installed, so a job cannot get a network of its own"
        )
    if not nsenter:
        return SandboxStatus(False, "nsenter (util-linux) is not installed")
    argv = [
        bwrap,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        setpriv,
        f"--reuid={PROBE_UID}",
        f"--regid={PROBE_UID}",
        "--clear-groups",
        "--no-new-privs",
        "true",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, f"bubblewrap could not be started: {exc}")
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return SandboxStatus(
            False,
            "bubblewrap cannot make namespaces here"
            + (f" ({detail[-1]})" if detail else f" (exit code {done.returncode})"),
        )
    probe = f"gantry-probe-{os.getpid()}"
    try:
        create_namespace(probe, ip)
    except NamespaceError as exc:
        return SandboxStatus(False, f"a job cannot get a network of its own: {exc}")
    finally:
        delete_namespace(probe, ip)
    limits = probe_limits()
    kind, problem = limits["kind"], limits["problem"]
    return SandboxStatus(True, "", bwrap, setpriv, ip, nsenter, kind, problem)


# --- hard limits (executor/cgroups.py, run as a program: Gantry imports nothing of it) ------

CGROUPS_SCRIPT = Path(settings.BASE_DIR) / "executor" / "cgroups.py"


def _cgroups(*args: str) -> list[str]:
    # -I: neither the script's folder (executor/code.py would shadow `code`) nor the
    # environment on the path.
    return [sys.executable, "-I", str(CGROUPS_SCRIPT), *args]


def probe_limits() -> dict[str, str]:
    """{"kind", "problem"}: whether a cgroup with limits can be made and joined here."""
    try:
        done = subprocess.run(
            _cgroups("probe"), capture_output=True, text=True, timeout=30, check=False
        )
        return json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {"kind": "", "problem": f"the cgroup probe did not answer ({exc})"}


def in_job_cgroup(pid: int, argv: list[str]) -> list[str]:
    """`argv` run in the cgroup of a running job's process `pid` (its command's), so that
    it counts in the job's limits; `argv` itself where jobs get no limits."""
    if not sandbox_status().limits:
        return argv
    return [*_cgroups("join", str(pid), "--"), *argv]


def in_own_cgroup(job, name: str, argv: list[str]) -> list[str]:
    """`argv` run in a cgroup of its own held to the job's memory, CPUs and processes
    (what a finished job's TensorBoard gets); `argv` itself where jobs get no limits."""
    if not sandbox_status().limits:
        return argv
    limits = job_limits(job)
    return [
        *_cgroups("run", "--name", f"{name}-{job.pk}"),
        *("--memory-bytes", str(limits["memory_bytes"]), "--pids", str(limits["pids"])),
        *("--cpus", str(limits["cpus"]), "--"),
        *argv,
    ]


def job_limits(job) -> dict[str, int]:
    """A worker's hard limits (executor.cgroups.Limits' fields): the job's request for
    memory and CPUs, the installation's for processes and disk."""
    return {
        "memory_bytes": job.memory_mb * 1024 * 1024,
        "pids": settings.GANTRY_JOB_MAX_PROCESSES,
        "cpus": job.cpus,
        "disk_bytes": settings.GANTRY_JOB_DISK_MB * 1024 * 1024,
    }


# --- network namespaces ------------------------------------------------------------------

NETNS_DIR = "/run/netns"  # where `ip netns` keeps its namespaces (bind mounts)
NETNS_PREFIX = "gantry-job-"


class NamespaceError(Exception):
    """A job's network namespace could not be made; the message says why."""


# A name lives for one launch (milliseconds); older ones are what a crash left.
ORPHAN_SECONDS = 600


def namespace_name(job_pk: int, attempt: int) -> str:
    """Unique per launch: Gantry instances sharing a machine (tests) reuse job ids."""
    return f"{NETNS_PREFIX}{job_pk}-{attempt}-{secrets.token_hex(4)}"


def namespace_path(name: str) -> str:
    return f"{NETNS_DIR}/{name}"


def parse_namespace_name(name: str) -> tuple[int, int] | None:
    """(job id, attempt) of a job's namespace name, None for any other name."""
    if not name.startswith(NETNS_PREFIX):
        return None
    parts = name[len(NETNS_PREFIX) :].split("-")
    if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def _ip(ip: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ip, *args], capture_output=True, text=True, timeout=20, check=False)


def create_namespace(name: str, ip: str) -> str:
    """Make the network namespace `name` with loopback up and nothing else; its path."""
    path = namespace_path(name)
    done = _ip(ip, "netns", "add", name)
    if done.returncode != 0:
        raise NamespaceError(done.stderr.strip() or f"ip netns add: exit {done.returncode}")
    done = _ip(ip, "-n", name, "link", "set", "lo", "up")
    if done.returncode != 0:
        raise NamespaceError(done.stderr.strip() or f"ip link set lo up: exit {done.returncode}")
    return path


def delete_namespace(name: str, ip: str) -> bool:
    """Remove the namespace's name; processes still in it keep it until they end."""
    if not os.path.exists(namespace_path(name)):
        return False
    return _ip(ip, "netns", "delete", name).returncode == 0


def job_namespaces() -> list[tuple[str, int, int]]:
    """(name, job id, attempt) of every job namespace on this machine."""
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        parsed = parse_namespace_name(name)
        if parsed is not None:
            found.append((name, *parsed))
    return found


def sweep_namespaces(older_than: float = ORPHAN_SECONDS) -> list[str]:
    """Remove the job namespace names a crashed launch left (any Gantry's on this
    machine: a name is only needed while its launch runs). Processes in such a
    namespace, if any, keep it; nothing new can enter it."""
    ip = shutil.which("ip")
    removed: list[str] = []
    if not ip:
        return removed
    now = time.time()
    for name, _, _ in job_namespaces():
        try:
            age = now - os.lstat(namespace_path(name)).st_mtime
        except OSError:
            continue
        if age > older_than and delete_namespace(name, ip):
            removed.append(name)
    return removed


def sandbox_status() -> SandboxStatus:
    """Cached per process: the probe starts a process."""
    return _probe(settings.GANTRY_SANDBOX)


# The top of the sandbox uid range belongs to long-lived helper servers (model endpoints'
# replicas), the rest to jobs: the two never share a uid, however high job ids climb.
SERVER_UIDS = 1024


def _server_band() -> int:
    return min(SERVER_UIDS, settings.GANTRY_SANDBOX_UID_COUNT // 2)


def job_uid(job) -> int:
    """The uid (and gid) a job's processes run as: one per job, none of them Gantry's, none
    of a helper server's (`server_uid`)."""
    jobs = settings.GANTRY_SANDBOX_UID_COUNT - _server_band()
    return settings.GANTRY_SANDBOX_UID_BASE + job.pk % jobs


def server_uid(key: int) -> int:
    """The uid a long-lived helper server runs as (an endpoint's replicas: `key` is the
    endpoint's id), from the top of the range down, below which job uids stop."""
    band = max(_server_band(), 1)
    top = settings.GANTRY_SANDBOX_UID_BASE + settings.GANTRY_SANDBOX_UID_COUNT - 1
    return top - key % band


def exposes_gantry(path: str | Path) -> bool:
    """True when binding `path` would show Gantry's data (its secret key, every tenant's
    files, the jobs' workdirs, the blob cache): the path is in one of those directories
    or holds one, or holds Gantry's checkout. A directory inside the checkout that is
    not the data directory (its virtualenv, examples/) is fine."""
    real = Path(os.path.realpath(path))
    storage = (settings.STORAGES.get("default") or {}).get("OPTIONS") or {}
    data = [
        Path(os.path.realpath(p))
        for p in (
            settings.DATA_DIR,
            settings.GANTRY_JOBS_DIR,
            settings.MEDIA_ROOT,
            storage.get("location") or settings.MEDIA_ROOT,
        )
    ]
    base = Path(os.path.realpath(settings.BASE_DIR))
    if real == base or real in base.parents:
        return True
    return any(real == d or real in d.parents or d in real.parents for d in data)


def runtime_paths(interpreter: str) -> list[str]:
    """What a Python interpreter needs to run: its virtualenv and its base installation
    (a pyvenv.cfg's `home`, or the real interpreter's prefix), unless under /usr."""
    paths: list[str] = []
    python = Path(interpreter)
    venv = python.parent.parent
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file():
        paths.append(str(venv.resolve()))
        if venv.is_absolute() and str(venv) != paths[-1]:
            paths.append(str(venv))  # a symlinked virtualenv: the interpreter's own path too
        for line in cfg.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(str(Path(value.strip()).resolve().parent))
    real = Path(os.path.realpath(python))
    paths.append(str(real.parent.parent))
    seen: list[str] = []
    for path in paths:
        if path == "/usr" or path.startswith("/usr/") or path == "/" or path in seen:
            continue
        seen.append(path)
    return seen


def gpu_minors(gpu_indices: list[int]) -> list[int]:
    """/dev/nvidia<minor> of each assigned GPU. NVML's index and the minor number agree
    on ordinary machines; NVML is asked when it is there."""
    minors = nvml_query(
        lambda nvml: [
            int(nvml.nvmlDeviceGetMinorNumber(nvml.nvmlDeviceGetHandleByIndex(i)))
            for i in gpu_indices
        ]
    )
    return list(gpu_indices) if minors is None else minors


def gpu_uuids(gpu_indices: list[int]) -> list[str] | None:
    """The UUIDs (``GPU-…``) of the GPUs with these NVML indices, or None when they are
    not known (no NVML, no nvidia-smi, an index missing).

    CUDA_VISIBLE_DEVICES names the assigned GPUs by UUID: inside the sandbox only their
    /dev/nvidia<minor> nodes exist, so CUDA may enumerate those alone (as under Slurm's
    device cgroups) and the host's index 3 may be nothing there; a UUID is unambiguous."""
    if not gpu_indices:
        return []
    found = _uuids_from_nvml(gpu_indices)
    if found is None:
        found = _uuids_from_nvidia_smi(gpu_indices)
    return found


def _uuids_from_nvml(gpu_indices: list[int]) -> list[str] | None:
    def uuid(nvml, index: int) -> str:
        value = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
        return value.decode() if isinstance(value, bytes) else str(value)

    uuids = nvml_query(lambda nvml: [uuid(nvml, index) for index in gpu_indices])
    if uuids is None or not all(u.startswith(("GPU-", "MIG-")) for u in uuids):
        return None
    return uuids


def _uuids_from_nvidia_smi(gpu_indices: list[int]) -> list[str] | None:
    by_index = {
        int(row[0]): row[1]
        for row in nvidia_smi_query("index,uuid") or []
        if len(row) >= 2 and row[0].isdigit() and row[1].startswith("GPU-")
    }
    if not all(i in by_index for i in gpu_indices):
        return None
    return [by_index[i] for i in gpu_indices]


# Control nodes every CUDA process needs, besides /dev/nvidia<minor> of its GPUs.
NVIDIA_CONTROL = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)


def gpu_devices(minors: list[int], dev: str = "/dev", proc: str = NVIDIA_PROC) -> list[str]:
    """Device nodes a worker with these GPUs sees: its /dev/nvidia<minor> nodes, the
    control nodes that exist and its GPUs' MIG capability nodes; none at all for a
    CPU-only worker."""
    if not minors:
        return []
    nodes = [f"{dev}/nvidia{m}" for m in minors]
    nodes += [
        dev + n.removeprefix("/dev")
        for n in NVIDIA_CONTROL
        if os.path.exists(dev + n.removeprefix("/dev"))
    ]
    return nodes + mig_caps(minors, dev, proc)


def worker_sandbox(
    job, interpreter: str, gpu_indices: list[int], shm: Path | None, netns_fd: int | None = None
) -> str:
    """GANTRY_SANDBOX for one worker's executor (JSON, see executor.sandbox.parse_spec).
    `netns_fd`: the descriptor of the attempt's network namespace the executor inherits."""
    status = sandbox_status()
    read_only = [
        p
        for p in [*runtime_paths(interpreter), *settings.GANTRY_JOB_READ_ONLY_PATHS]
        if not exposes_gantry(p)
    ]
    uid = job_uid(job)
    fake = getattr(settings, "GANTRY_LOCAL_FAKE_GPUS", 0)
    minors = [] if fake or not gpu_indices else gpu_minors(gpu_indices)
    spec = {
        "bwrap": status.bwrap,
        "setpriv": status.setpriv,
        "uid": uid,
        "gid": uid,
        "read_only": read_only,
        "devices": gpu_devices(minors),
        "sys": gpu_sysfs(minors),
    }
    if status.limits:
        spec["limits"] = job_limits(job)
    if shm is not None:
        spec["shm"] = str(shm)
    if netns_fd is not None:
        spec["netns_fd"] = netns_fd
        spec["nsenter"] = status.nsenter
    return json.dumps(spec)


# What a sandboxed helper server (a job's TensorBoard, a model endpoint's replica) sees of
# the host besides its interpreter: the system's programs and libraries, read-only.
SERVER_ETC = ("passwd", "group", "nsswitch.conf", "hosts", "localtime", "ld.so.cache", "ld.so.conf")
SERVER_USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The whole environment a helper server starts with: nothing of Gantry's own.
SERVER_ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def server_sandbox(
    status: SandboxStatus, python: str, uid: int, binds: list[str], command: list[str]
) -> list[str]:
    """The command line of a helper server run where jobs run (bubblewrap, then setpriv):
    its own uid, no network, no other process, the host's /usr and `python`'s runtime
    read-only (never Gantry's own files), `binds` (the caller's files and the folder its
    socket goes in), and `python` `command` run as `uid` with no capabilities."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in SERVER_USR_LINKS:
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in SERVER_ETC:
        args += ["--ro-bind-try", "/etc/" + name, "/etc/" + name]
    # A /tmp of its own that its user can write, as a job's: libraries look for a usable
    # temporary folder as they load (torch, through ctypes.util.find_library, fails without).
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    made = {"/"}
    for path in runtime_paths(python):
        if exposes_gantry(path):
            continue
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            if parent not in made:  # bwrap would make it 0700, closed to the server's user
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/run/gantry"]
    return [
        status.bwrap,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--new-session",
        *args,
        *binds,
        "--chdir",
        "/tmp",
        "--",
        status.setpriv,
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        python,
        *command,
    ]


def isolation_notice() -> str | None:
    """For the cluster page: what is not isolated here, in plain words, or None."""
    if settings.GANTRY_JOB_BACKEND != "local":
        return None
    status = sandbox_status()
    if status.available and not status.limits:
        return (
            f"Jobs on this machine have no hard limits: {status.limits_problem}. One job can "
            "use all of its memory, processes and disk."
        )
    if status.available:
        return None
    then = (
        "GANTRY_ALLOW_UNISOLATED_JOBS=true lets every tenant's jobs run anyway."
        if settings.GANTRY_ALLOW_UNISOLATED_JOBS
        else "So jobs of one tenant only are accepted."
    )
    return (
        f"Jobs on this machine are not isolated: {status.reason}. A job can read Gantry's "
        f"data and other jobs' files. {then}"
    )


def isolation_refusal(project, exclude_job=None) -> str | None:
    """Why a job of `project` may not run unsandboxed, or None.

    Without a sandbox every job can read every other job's files and Gantry's own, so
    Gantry runs the jobs of one tenant only, unless an administrator accepts the risk."""
    if settings.GANTRY_JOB_BACKEND != "local" or settings.GANTRY_ALLOW_UNISOLATED_JOBS:
        return None
    status = sandbox_status()
    if status.available:
        return None
    from jobs.models import Job

    others = Job.objects.filter(backend="local").exclude(project__tenant=project.tenant_id)
    if exclude_job is not None:
        others = others.exclude(pk=exclude_job.pk)
    if not others.exists():
        return None
    # The other tenant is not named: its existence is all a stranger may learn.
    return (
        f"Jobs here run without isolation ({status.reason}), so this Gantry runs the jobs "
        "of one tenant only, and another tenant already has jobs. An administrator "
        "can install bubblewrap and run Gantry as root, or set "
        "GANTRY_ALLOW_UNISOLATED_JOBS=true to accept that jobs can read each other's "
        "files and Gantry's."
    )


@checks.register(checks.Tags.security)
def check_sandbox(app_configs=None, **kwargs):
    """Start-up: say in plain words when local jobs cannot be isolated."""
    if settings.GANTRY_JOB_BACKEND != "local":
        return []
    problems = []
    for path in settings.GANTRY_JOB_READ_ONLY_PATHS:
        if not os.path.isabs(path) or exposes_gantry(path):
            problems.append(
                checks.Error(
                    f"GANTRY_JOB_READ_ONLY_PATHS holds {path!r}",
                    hint="Give absolute paths that neither hold Gantry's checkout nor lie in "
                    "its data directory (the secret key and every tenant's files are there).",
                    id="jobs.E020",
                )
            )
    status = sandbox_status()
    if status.available and not status.limits:
        problems.append(
            checks.Warning(
                f"Jobs run without hard limits: {status.limits_problem}.",
                hint="A job can then use all of this machine's memory, processes and disk. "
                "Give Gantry cgroups: v2 with the memory, pids and cpu controllers, the v1 "
                "hierarchies of those, or systemd.",
                id="jobs.W022",
            )
        )
    if status.available:
        return problems
    if settings.GANTRY_SANDBOX == "required":
        problems.append(
            checks.Error(
                f"Jobs cannot be sandboxed: {status.reason}.",
                hint="GANTRY_SANDBOX=required: install bubblewrap and run Gantry as root.",
                id="jobs.E021",
            )
        )
        return problems
    allowed = settings.GANTRY_ALLOW_UNISOLATED_JOBS
    problems.append(
        checks.Warning(
            f"Jobs run without isolation: {status.reason}. A job can read Gantry's data "
            "and other jobs' files.",
            hint=(
                "GANTRY_ALLOW_UNISOLATED_JOBS=true: jobs of every tenant run anyway."
                if allowed
                else "Only the jobs of one tenant are accepted; install bubblewrap and run "
                "Gantry as root, or set GANTRY_ALLOW_UNISOLATED_JOBS=true to accept the risk."
            ),
            id="jobs.W020",
        )
    )
    return problems
