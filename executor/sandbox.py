"""Run the job's command in a bubblewrap sandbox (standard library only).

The executor stays outside: it holds the job token, stages inputs from the machine's
shared blob cache and ships logs. Only the user's command (or JupyterLab) goes in,
with ``bwrap`` (run as root, no user namespace) making new mount, PID, IPC and UTS
namespaces, then ``setpriv`` dropping to the job's own uid/gid with no capabilities,
an empty bounding set and ``no_new_privs``. Inside it sees:

* its working directory, writable, at /job (paths the executor hands over, such as
  GANTRY_OUTPUTS_DIR, are translated) — except ``.gantry`` (the executor's state),
  read-only and a mount point the job cannot rename, with the metrics file writable;
* the runtime and the configured read-only paths, read-only;
* /usr and the /etc files programs need (not /etc/shadow, not ssh keys);
* /proc of its own PID namespace, a minimal /dev, a /tmp and /dev/shm of its own
  (writable by anyone, sticky, as on a host), its GPUs' nodes;
* of /sys only the CPU and NUMA topology and, for a GPU job, its GPUs' PCI device
  folders (the spec's ``sys``: what CUDA and NVML read), none of the host's other devices.

Its hard limits (memory, processes, CPU, disk) are limits.py's: the spec's ``limits``.

The network: with ``netns_fd`` in the spec (Gantry always gives one), the command runs
in that network namespace (``nsenter --net=/proc/<executor>/fd/<n> bwrap …``): the job
attempt's own, with loopback only, shared by the workers of one job (they rendezvous on
127.0.0.1) and by nothing else. The executor inherits the namespace as that descriptor
from Gantry and holds it while it lives, so the namespace ends with the last of its
executors and commands (Gantry keeps no name for it). The executor itself stays in the
host's namespace to talk to Gantry; the command needs no network to Gantry: metrics and
the preemption notice are files in the workdir, outputs are uploaded by the executor.
A descriptor that is not a network namespace other than the executor's own stops the
start: the command never falls back to the host's network.

No ``--new-session``: the command must stay in the executor's process group so that
SIGTERM-then-SIGKILL and the memory accounting (the group's RSS) reach it; the executor
has no controlling terminal (it is started in a session of its own), which is what
``--new-session`` guards against.

The spec comes from Gantry in GANTRY_SANDBOX (JSON), see :func:`parse_spec`.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from typing import Any

from .cgroups import Limits

SPEC_ENV = "GANTRY_SANDBOX"
NS_GET_NSTYPE = 0xB703  # ioctl on a namespace descriptor: its CLONE_NEW* type
CLONE_NEWNET = 0x40000000
# Where the workdir appears inside: a neutral path, so nothing of the host's layout shows.
WORKDIR = "/job"
# Where the executor package (log_metric, preemption_requested) appears inside.
PYTHONPATH = "/run/gantry/python"

# /etc entries programs need; everything else of /etc stays out.
ETC = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "hostname",
    "resolv.conf",
    "gai.conf",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "fonts",
    "matplotlibrc",
)
# Top-level directories that merged-/usr systems make symlinks into /usr.
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What of /sys a job sees when the spec names nothing (jobs/compute/sandbox.py adds a GPU
# job's PCI device folders): the CPU and NUMA topology that thread pools and CUDA read.
SYS = ("/sys/devices/system/cpu", "/sys/devices/system/node")


class SandboxError(Exception):
    """The sandbox spec is unusable; the message is shown to the user."""


def parse_spec(raw: str | None) -> dict[str, Any] | None:
    """The sandbox spec from GANTRY_SANDBOX, or None when jobs run unsandboxed.

    Keys: bwrap, setpriv (absolute paths), uid, gid (ints, not 0), read_only (host
    paths), devices (device nodes), shm (optional host directory for /dev/shm, shared
    by the workers of one job), netns_fd and nsenter (optional, together: the inherited
    descriptor of the network namespace to run in, and the nsenter that enters it), sys
    (paths under /sys to show, read-only; a link is made again as a link), limits
    (optional: executor.cgroups.Limits' fields)."""
    if not raw:
        return None
    try:
        spec = json.loads(raw)
    except ValueError as exc:
        raise SandboxError(f"{SPEC_ENV} is not JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise SandboxError(f"{SPEC_ENV} must be a JSON object")
    for key in ("uid", "gid"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SandboxError(f"{SPEC_ENV}: {key} must be a positive integer, not {value!r}")
    for key in ("bwrap", "setpriv"):
        value = spec.get(key)
        if not isinstance(value, str) or not os.path.isabs(value):
            raise SandboxError(f"{SPEC_ENV}: {key} must be an absolute path, not {value!r}")
    for key in ("read_only", "devices"):
        value = spec.setdefault(key, [])
        if not isinstance(value, list) or not all(
            isinstance(p, str) and os.path.isabs(p) for p in value
        ):
            raise SandboxError(f"{SPEC_ENV}: {key} must be a list of absolute paths")
    for key in ("shm", "nsenter"):
        value = spec.get(key)
        if value is not None and not (isinstance(value, str) and os.path.isabs(value)):
            raise SandboxError(f"{SPEC_ENV}: {key} must be an absolute path, not {value!r}")
    sys_paths = spec.setdefault("sys", list(SYS))
    if not isinstance(sys_paths, list) or not all(
        isinstance(p, str) and p.startswith("/sys/") and ".." not in p.split("/") for p in sys_paths
    ):
        raise SandboxError(f"{SPEC_ENV}: sys must be a list of paths under /sys")
    if spec.get("limits") is not None:
        try:
            Limits.parse(spec["limits"])
        except ValueError as exc:
            raise SandboxError(f"{SPEC_ENV}: {exc}") from exc
    fd = spec.get("netns_fd")
    if fd is not None and (isinstance(fd, bool) or not isinstance(fd, int) or fd < 3):
        raise SandboxError(f"{SPEC_ENV}: netns_fd must be a descriptor number (3 or more)")
    if (fd is None) != (spec.get("nsenter") is None):
        raise SandboxError(f"{SPEC_ENV}: netns_fd and nsenter go together")
    return spec


def network_namespace(fd: int) -> str:
    """The path nsenter enters the inherited network namespace by. OSError when `fd` is
    not a network namespace, or is this process's own (the host's)."""
    try:
        kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
        inode = os.fstat(fd).st_ino
    except OSError as exc:
        raise OSError(f"descriptor {fd} is not the job's network namespace: {exc}") from exc
    if kind != CLONE_NEWNET:
        raise OSError(f"descriptor {fd} is not a network namespace")
    if inode == os.stat("/proc/self/ns/net").st_ino:
        raise OSError("the job's network namespace is the host's")
    return f"/proc/{os.getpid()}/fd/{fd}"


class _Mounts:
    """bwrap arguments in order, with the parents of each mount point made first:
    bwrap makes missing parents mode 0700 (root's), which the job's user could not
    walk through, so each is made 0755 here unless an earlier mount provides it."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.made: set[str] = {"/"}
        self.mounted: list[str] = []

    def _covered(self, path: str) -> bool:
        return any(path == m or path.startswith(m.rstrip("/") + "/") for m in self.mounted)

    def _parents(self, dest: str) -> None:
        parts = dest.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            if parent in self.made or self._covered(parent):
                continue
            self.args += ["--perms", "0755", "--dir", parent]
            self.made.add(parent)

    def add(self, option: str, src: str | None, dest: str, perms: str | None = None) -> None:
        self._parents(dest)
        self.args += ["--perms", perms] if perms else []
        self.args += [option, dest] if src is None else [option, src, dest]
        if src is not None:  # a host directory's own subdirectories already exist
            self.mounted.append(dest)
        self.made.add(dest)


def bwrap_argv(
    spec: dict[str, Any],
    command: list[str],
    *,
    workdir: str,
    state_dir: str,
    metrics_file: str,
    executor_package: str,
) -> list[str]:
    """The argv that runs `command` sandboxed (no file is touched). OSError when the
    spec's network namespace is not one (see :func:`network_namespace`)."""
    fd = spec.get("netns_fd")
    netns = network_namespace(fd) if fd is not None else None
    m = _Mounts()
    m.add("--ro-bind", "/usr", "/usr")
    for name in USR_LINKS:
        path = "/" + name
        if os.path.islink(path):
            m.args += ["--symlink", os.readlink(path), path]
            m.made.add(path)
        elif os.path.isdir(path):
            m.add("--ro-bind", path, path)
    for name in ETC:
        m.add("--ro-bind-try", "/etc/" + name, "/etc/" + name)
    for path in spec.get("sys", SYS):
        if os.path.islink(path):  # /sys/bus/pci/devices/<bus id>: a link into /sys/devices
            m._parents(path)
            m.args += ["--symlink", os.readlink(path), path]
            m.made.add(path)
        else:
            m.add("--ro-bind-try", path, path)
    m.add("--proc", None, "/proc")
    m.add("--dev", None, "/dev")
    m.add("--tmpfs", None, "/tmp", perms="1777")  # the job's own: TMPDIR
    shm = spec.get("shm")
    if shm:
        m.add("--bind", shm, "/dev/shm")
    else:
        m.add("--tmpfs", None, "/dev/shm", perms="1777")
    for device in spec.get("devices") or []:
        m.add("--dev-bind-try", device, device)
    for path in spec.get("read_only") or []:
        m.add("--ro-bind-try", path, path)
    m.add("--ro-bind", executor_package, PYTHONPATH + "/executor")
    # Later mounts cover earlier ones: the workdir over any read-only parent, then
    # the executor's state read-only over the workdir, then the metrics file writable.
    m.add("--bind", workdir, WORKDIR)
    m.add("--ro-bind", state_dir, inside(state_dir, workdir))
    m.add("--bind", metrics_file, inside(metrics_file, workdir))
    uid, gid = str(spec["uid"]), str(spec["gid"])
    # nsenter joins the namespace and execs bwrap (no fork: the pid stays the group's
    # leader, which the executor signals and waits for).
    enter = [spec["nsenter"], f"--net={netns}", "--"] if netns else []
    return [
        *enter,
        spec["bwrap"],
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        *m.args,
        "--chdir",
        WORKDIR,
        "--",
        spec["setpriv"],
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        *command,
    ]


def group_members(pgid: int) -> list[int]:
    """Pids (as this process sees them) of the live processes in process group `pgid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def inside(path: str, workdir: str) -> str:
    """Where a path in the workdir appears inside the sandbox."""
    rel = os.path.relpath(path, workdir)
    if rel == ".":
        return WORKDIR
    if rel.startswith(".."):
        raise ValueError(f"{path} is not in the workdir {workdir}")
    return WORKDIR + "/" + rel


# Paths the executor hands to the command; inside they are under WORKDIR.
PATH_VARS = ("GANTRY_OUTPUTS_DIR", "GANTRY_METRICS_FILE", "GANTRY_PREEMPT_FILE")


def sandbox_env(env: dict[str, str], spec_env: dict[str, Any], workdir: str) -> dict[str, str]:
    """The command's environment inside: a home in the workdir, its own /tmp, the
    executor helpers on PYTHONPATH (unless the job set its own), no platform paths."""
    env = dict(env)
    for name in ("GANTRY_CACHE_DIR", "GANTRY_CACHE_MAX_BYTES", "GANTRY_FINAL_FLUSH_SECONDS"):
        env.pop(name, None)
    for name in PATH_VARS:
        if name in env:
            env[name] = inside(env[name], workdir)
    env.update({"HOME": WORKDIR, "TMPDIR": "/tmp", "USER": "gantry-job", "LOGNAME": "gantry-job"})
    if "PYTHONPATH" not in spec_env:
        env["PYTHONPATH"] = PYTHONPATH
    return env


def prepare_workdir(
    workdir: str, state_dir: str, metrics_file: str, uid: int, gid: int, shm: str | None
) -> None:
    """Hand the workdir to the job's user, keeping the executor's state root's.

    Read-only files (staged read-only inputs: hard links to the machine's blob cache,
    mode 0444) stay root's, so the job can read them but never change the cached blob;
    so does the executor's own log beside them. On a relaunch the workdir holds what the
    previous attempt left, links included: every folder is entered and every file is
    changed through descriptors (executor/safefs.py), so no link is ever followed and a
    file's link count is read from the very inode that is then given away."""
    from .safefs import DIR_FLAGS, READ_FLAGS, Dir, open_beneath

    state = os.path.relpath(state_dir, workdir)
    with Dir.workdir(workdir) as work:
        os.fchown(work.fd, uid, gid)
        for rel, mode in work.entries():
            if rel == state or rel.startswith(state + "/") or rel == "executor.log":
                continue
            if stat.S_ISDIR(mode):
                flags = DIR_FLAGS
            elif stat.S_ISREG(mode) and mode & 0o222:
                flags = READ_FLAGS
            else:
                continue  # links, sockets, FIFOs, read-only files: left as they are
            try:
                fd = open_beneath(work.fd, rel, flags)
            except OSError:
                continue  # replaced meanwhile (by a link: refused, not followed)
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                    os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
    os.chown(state_dir, 0, 0, follow_symlinks=False)
    os.chmod(state_dir, 0o755)
    spool = os.path.join(state_dir, "spool")
    if os.path.isdir(spool):
        os.chmod(spool, 0o700)
    os.chown(metrics_file, uid, gid, follow_symlinks=False)
    os.chmod(metrics_file, 0o644)
    if shm:
        os.makedirs(shm, exist_ok=True)
        os.chown(shm, uid, gid, follow_symlinks=False)
        os.chmod(shm, 0o700)
