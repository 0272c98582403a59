"""A job worker's cgroup on the local backend (standard library only; see limits.py for
what each limit does and what the executor does with it).

Which cgroups: ``systemd-run --scope`` where systemd manages the machine (it owns the
cgroup tree there, and the limits become the scope's properties); else the cgroup
filesystem: v2 where the machine mounts it with the memory, pids and cpu controllers, the
v1 hierarchies of those controllers otherwise. The jobs' cgroups go in a ``gantry``
cgroup: under the executor's own one on v1; on v2 beside it, under the nearest ancestor
without processes of its own (v2 lets only such a cgroup, or the root, hand controllers
to its children). The command joins its cgroup before it runs: a shell writes itself
into ``cgroup.procs`` and execs it, so no process of the job is ever outside, and the
executor never is inside.

Gantry runs this file as a program, ``python -I executor/cgroups.py``: ``probe`` (can
limits be set here? JSON), ``join PID -- ARGV`` (ARGV in the job cgroup process PID is in:
terminals, a running job's TensorBoard) and ``run --name … -- ARGV`` (ARGV in a cgroup of
its own with the given limits until it exits: a finished job's TensorBoard).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

CONTROLLERS = ("memory", "pids", "cpu")
BASE = "gantry"  # the cgroup the jobs' cgroups are made in
SLICE = "gantry.slice"  # and under systemd, the slice of the jobs' scopes
PERIOD_US = 100_000
# The shell that puts the command in its cgroup: files to write itself into, then `--`.
JOIN = (
    'while [ "$1" != -- ]; do echo 0 > "$1" || '
    '{ echo "gantry: cannot join the job\'s cgroup ($1)" >&2; exit 125; }; shift; done; '
    'shift; exec "$@"'
)


class LimitsError(OSError):
    """Limits cannot be set here; the message says why in plain words."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids: int
    cpus: float
    disk_bytes: int | None = None

    @classmethod
    def parse(cls, raw: object) -> Limits:
        """From the sandbox spec's ``limits`` object (ValueError when malformed)."""
        if not isinstance(raw, dict):
            raise ValueError("limits must be a JSON object")

        def number(key, kind, minimum, optional=False):
            value = raw.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
                raise ValueError(f"limits: {key} must be a number of at least {minimum}")
            return value

        return cls(
            memory_bytes=number("memory_bytes", int, 1 << 20),
            pids=number("pids", int, 8),
            cpus=float(number("cpus", (int, float), 0.01)),
            disk_bytes=number("disk_bytes", int, 1 << 20, optional=True),
        )

    def quota_us(self) -> int:
        return max(1000, round(self.cpus * PERIOD_US))

    def weight(self) -> int:
        """cpu.weight (v2, 100 a CPU): under contention jobs share in their CPUs' ratio."""
        return min(10_000, max(1, round(self.cpus * 100)))

    def file_blocks(self) -> int | None:
        """RLIMIT_FSIZE in the shell's 512-byte blocks: one file may go just past the
        disk limit (so that the scan sees it over), never further."""
        return None if self.disk_bytes is None else self.disk_bytes // 512 + 1


# --- where the cgroups are ----------------------------------------------------------------


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 1 or 2
    controllers: frozenset[str]
    mount: str  # where it is mounted
    root: str  # the cgroup at the mount point (mountinfo's 4th field)

    def directory(self, cgroup: str) -> str:
        """The directory of `cgroup` (a path as /proc/<pid>/cgroup names it)."""
        root = self.root.rstrip("/")
        if cgroup != self.root and not cgroup.startswith(root + "/"):
            raise LimitsError(f"cgroup {cgroup} is not under the mount {self.mount}")
        return self.mount + cgroup[len(root) :] if root else self.mount + cgroup.rstrip("/")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def hierarchies(mountinfo: str) -> list[Hierarchy]:
    """The cgroup hierarchies a mountinfo text mounts (v2's controllers: those its root
    offers)."""
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        mount, root = _unescape(fields[4]), _unescape(fields[3])
        if tail[0] == "cgroup2":
            try:
                controllers = frozenset(_read(mount + "/cgroup.controllers").split())
            except OSError:
                continue
            found.append(Hierarchy(2, controllers, mount, root))
        elif tail[0] == "cgroup":  # super options: rw, the controllers, name=…, flags
            options = {o for o in tail[2].split(",") if o not in ("rw", "ro")}
            found.append(Hierarchy(1, frozenset(options), mount, root))
    return found


def memberships(proc_cgroup: str) -> dict[str, str]:
    """{controller (or "" for v2): cgroup path} from a /proc/<pid>/cgroup text."""
    paths = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def systemd_run() -> str | None:
    """systemd-run where systemd manages this machine (sd_booted's test), else None."""
    if not os.path.isdir("/run/systemd/system"):
        return None
    return shutil.which("systemd-run")


class Cgroups:
    """The machine's cgroup filesystem as this process sees it."""

    def __init__(self, mountinfo: str | None = None, proc_cgroup: str | None = None) -> None:
        self.hierarchies = hierarchies(mountinfo or _read("/proc/self/mountinfo"))
        self.own = memberships(proc_cgroup or _read("/proc/self/cgroup"))

    def unified(self) -> Hierarchy | None:
        for h in self.hierarchies:
            if h.version == 2 and set(CONTROLLERS) <= h.controllers:
                return h
        return None

    def v1(self) -> dict[str, Hierarchy] | None:
        found = {}
        for h in self.hierarchies:
            for controller in CONTROLLERS:
                if h.version == 1 and controller in h.controllers:
                    found[controller] = h
        return found if len(found) == len(CONTROLLERS) else None

    def create(self, name: str, limits: Limits) -> Cgroup:
        """A new cgroup `name` with `limits`, the command not in it yet (see `Cgroup.wrap`)."""
        tool = systemd_run()
        if tool:
            return SystemdScope(tool, name, limits, self)
        unified, v1 = self.unified(), self.v1()
        if unified is None and v1 is None:
            _unavailable(self)
        for _ in range(5):
            try:
                if unified is not None:
                    return CgroupV2.create(unified, self.own.get("", "/"), name, limits)
                return CgroupV1.create(v1, self.own, name, limits)
            except FileNotFoundError:  # the `gantry` cgroup went with another's last job
                continue
        raise LimitsError(f"cannot make the cgroup {name}: its parent keeps disappearing")

    def of_process(self, pid: int) -> list[str]:
        """The directories of the job cgroup process `pid` is in (a cgroup of a ``gantry``
        cgroup or a scope of gantry.slice); [] when it is in none."""
        theirs = memberships(_read(f"/proc/{pid}/cgroup"))
        found = []
        for h in self.hierarchies:
            key = "" if h.version == 2 else next((c for c in h.controllers if c in theirs), None)
            path = theirs.get(key) if key is not None else None
            if not path or path == self.own.get(key):
                continue
            parent = os.path.basename(os.path.dirname(path))
            if parent == BASE or (parent == SLICE and path.endswith(".scope")):
                found.append(h.directory(path))
        return sorted(set(found))


def _unavailable(cgroups: Cgroups) -> NoReturn:
    kinds = sorted({f"v{h.version}" for h in cgroups.hierarchies})
    unified = next((h for h in cgroups.hierarchies if h.version == 2), None)
    detail = (
        f"cgroup v2 at {unified.mount} offers only: {' '.join(sorted(unified.controllers)) or 'none'}"
        if unified
        else "cgroup " + (", ".join(kinds) if kinds else "is not mounted")
    )
    raise LimitsError(
        f"this machine has no cgroup hierarchy with the memory, pids and cpu controllers ({detail})"
    )


# --- one worker's cgroup ------------------------------------------------------------------


class Cgroup:
    """One worker's cgroup: made with its limits, joined by the command as it starts,
    read and removed when it ends."""

    kind = ""

    def __init__(self, directories: list[str], limits: Limits) -> None:
        self.directories = directories
        self.limits = limits

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run in this cgroup, with the file-size limit (no fork: the pid stays)."""
        ulimit = self.limits.file_blocks()
        script = (f"ulimit -f {ulimit} || exit 125; " if ulimit else "") + JOIN
        procs = [d + "/cgroup.procs" for d in self.directories]
        return ["/bin/sh", "-c", script, "gantry-limits", *procs, "--", *argv]

    def processes(self) -> list[int]:
        pids: set[int] = set()
        for d in self.directories:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in _read(d + "/cgroup.procs").split())
        return sorted(pids)

    def oom_kills(self) -> int:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL every process left in it (those that left the process group too)."""
        for _ in range(100):
            pids = self.processes()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        """Remove it once its processes are gone (they take a moment to exit), and the
        `gantry` cgroup with the last job in it (a service manager removing Gantry's own
        cgroup would find it in the way)."""
        deadline = time.monotonic() + 5
        for d in self.directories:
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            if os.path.basename(os.path.dirname(d)) == BASE:
                with contextlib.suppress(OSError):  # other jobs' cgroups are still in it
                    os.rmdir(os.path.dirname(d))


def _make(parent: str, name: str) -> str:
    path = f"{parent}/{name}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    return path


def _sweep(base: str) -> None:
    """Remove the empty cgroups of executors that are gone (a crash leaves its own)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            found = re.search(r"-p(\d+)$", name)
            if not found or not os.path.isdir(f"{base}/{name}"):
                continue
            try:
                os.kill(int(found.group(1)), 0)
            except ProcessLookupError:
                with contextlib.suppress(OSError):
                    os.rmdir(f"{base}/{name}")  # refused while processes remain
            except PermissionError:
                pass


class CgroupV2(Cgroup):
    """cgroup v2 (Documentation/admin-guide/cgroup-v2.rst): memory.max, memory.swap.max,
    memory.oom.group, pids.max, cpu.max; memory.events' oom_kill; cgroup.kill."""

    kind = "cgroup v2"

    @classmethod
    def create(cls, h: Hierarchy, own: str, name: str, limits: Limits) -> CgroupV2:
        parent = own
        # "No internal processes": only a cgroup without processes (or the root) may
        # enable controllers for its children, so the jobs go beside ours, not under it.
        while parent != h.root and _read(h.directory(parent) + "/cgroup.procs").strip():
            parent = os.path.dirname(parent)
        top = h.directory(parent)
        cls.enable(top)
        base = _make(top, BASE)
        cls.enable(base)
        _sweep(base)
        path = _make(base, name)
        box = cls([path], limits)
        try:
            _write(path + "/memory.max", str(limits.memory_bytes))
            if os.path.exists(path + "/memory.swap.max"):  # absent without swap accounting
                _write(path + "/memory.swap.max", "0")
            _write(path + "/memory.oom.group", "1")
            _write(path + "/pids.max", str(limits.pids))
            _write(path + "/cpu.max", f"{limits.quota_us()} {PERIOD_US}")
            _write(path + "/cpu.weight", str(limits.weight()))
        except OSError as exc:
            box.remove()
            raise LimitsError(f"cgroup v2: cannot set the limits in {path}: {exc}") from exc
        return box

    @staticmethod
    def enable(directory: str) -> None:
        """The memory, pids and cpu controllers for `directory`'s children."""
        enabled = _read(directory + "/cgroup.subtree_control").split()
        missing = [c for c in CONTROLLERS if c not in enabled]
        if not missing:
            return
        offered = _read(directory + "/cgroup.controllers").split()
        absent = [c for c in missing if c not in offered]
        if absent:
            raise LimitsError(
                f"cgroup v2: {directory} is not given the {', '.join(absent)} controller(s)"
            )
        try:
            _write(directory + "/cgroup.subtree_control", " ".join("+" + c for c in missing))
        except OSError as exc:
            raise LimitsError(
                f"cgroup v2: cannot enable {', '.join(missing)} in {directory}: {exc.strerror}"
                + (
                    " (it holds processes: run Gantry in a cgroup of its own)"
                    if exc.errno == errno.EBUSY
                    else ""
                )
            ) from exc

    def oom_kills(self) -> int:
        try:
            events = dict(
                line.split() for line in _read(self.directories[0] + "/memory.events").splitlines()
            )
        except (OSError, ValueError):
            return 0
        return int(events.get("oom_kill", 0))

    def kill(self) -> None:
        path = self.directories[0] + "/cgroup.kill"  # Linux 5.14: the kernel does it at once
        if os.path.exists(path):
            with contextlib.suppress(OSError):
                _write(path, "1")
        super().kill()


class CgroupV1(Cgroup):
    """cgroup v1 (Documentation/admin-guide/cgroup-v1/): one cgroup in each of the memory,
    pids and cpu hierarchies (co-mounted ones share it)."""

    kind = "cgroup v1"

    @classmethod
    def create(
        cls, v1: dict[str, Hierarchy], own: dict[str, str], name: str, limits: Limits
    ) -> CgroupV1:
        paths = {}
        for controller, h in v1.items():
            base = _make(h.directory(own.get(controller, "/")), BASE)
            _sweep(base)
            paths[controller] = _make(base, name)
        box = cls(sorted(set(paths.values())), limits)
        memory, pids, cpu = paths["memory"], paths["pids"], paths["cpu"]
        box.memory = memory
        try:
            _write(memory + "/memory.limit_in_bytes", str(limits.memory_bytes))
            if os.path.exists(memory + "/memory.memsw.limit_in_bytes"):  # swap accounting
                _write(memory + "/memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            _write(pids + "/pids.max", str(limits.pids))
            _write(cpu + "/cpu.cfs_period_us", str(PERIOD_US))
            _write(cpu + "/cpu.cfs_quota_us", str(limits.quota_us()))
            _write(cpu + "/cpu.shares", str(limits.weight() * 1024 // 100))
        except OSError as exc:
            box.remove()
            raise LimitsError(f"cgroup v1: cannot set the limits in {memory}: {exc}") from exc
        return box

    def oom_kills(self) -> int:
        try:
            control = dict(
                line.split() for line in _read(self.memory + "/memory.oom_control").splitlines()
            )
        except (OSError, ValueError):
            return 0
        return int(control.get("oom_kill", 0))  # Linux 4.13


class SystemdScope(Cgroup):
    """A transient scope unit (``systemd-run --scope``) with the limits as its properties:
    systemd owns the cgroup tree where it manages the machine."""

    kind = "systemd scope"

    def __init__(self, tool: str, name: str, limits: Limits, cgroups: Cgroups) -> None:
        self.tool, self.unit = tool, f"{name}.scope"
        path = f"/{SLICE}/{self.unit}"
        directories = []
        for h in cgroups.hierarchies:
            if h.version == 2 or h.controllers & set(CONTROLLERS):
                with contextlib.suppress(LimitsError):
                    directories.append(h.directory(path))
        super().__init__(sorted(set(directories)), limits)
        self.oom_seen = 0

    def wrap(self, argv: list[str], collect: bool = False) -> list[str]:
        limits = self.limits
        properties = [
            f"MemoryMax={limits.memory_bytes}",
            "MemorySwapMax=0",
            f"TasksMax={limits.pids}",
            f"CPUQuota={round(limits.cpus * 100)}%",
            f"CPUWeight={limits.weight()}",
        ]
        run = [self.tool, "--scope", "--quiet", f"--unit={self.unit}", f"--slice={SLICE}"]
        run += ["--collect"] if collect else []
        run += [f"--property={p}" for p in properties]
        # The scope is made and joined by systemd-run; the shell only sets RLIMIT_FSIZE.
        shell = Cgroup([], limits).wrap(argv)
        return [*run, "--", *shell]

    def sample(self) -> None:
        """Read the OOM count while the scope's cgroup is there: it goes with its last
        process (the disk watch calls this every few seconds)."""
        for d in self.directories:
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError, ValueError):
                    counts = dict(line.split() for line in _read(f"{d}/{name}").splitlines())
                    self.oom_seen = max(self.oom_seen, int(counts.get("oom_kill", 0)))

    def oom_kills(self) -> int:
        self.sample()
        # systemd (253 and later) keeps the scope's verdict after its cgroup has gone.
        if (
            not self.oom_seen
            and self._systemctl("show", "--property=Result", "--value") == "oom-kill"
        ):
            self.oom_seen = 1
        return self.oom_seen

    def kill(self) -> None:
        self._systemctl("kill", "--signal=SIGKILL")

    def remove(self) -> None:
        self._systemctl("stop")
        self._systemctl("reset-failed")

    def _systemctl(self, *args: str) -> str:
        systemctl = shutil.which("systemctl") or "systemctl"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [systemctl, *args, self.unit], capture_output=True, text=True, timeout=20
            )
            return done.stdout.strip()
        return ""


# --- Gantry's side: a program -------------------------------------------------------------


def probe() -> dict[str, str]:
    """Make a cgroup with limits, run `true` in it, remove it: {"kind", "problem"}."""
    try:
        box = Cgroups().create(f"probe-p{os.getpid()}", Limits(64 << 20, 16, 1.0, 64 << 20))
    except (LimitsError, OSError) as exc:
        return {"kind": "", "problem": str(exc)}
    try:
        done = subprocess.run(box.wrap(["true"]), capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            return {"kind": "", "problem": f"{box.kind}: {done.stderr.strip() or done.returncode}"}
    finally:
        box.kill()
        with contextlib.suppress(OSError):
            box.remove()
    return {"kind": box.kind, "problem": ""}


def join(pid: int, argv: list[str]) -> None:
    """Exec `argv` in the job cgroup process `pid` is in (as it is when there is none)."""
    for directory in Cgroups().of_process(pid):
        _write(directory + "/cgroup.procs", str(os.getpid()))
    os.execvp(argv[0], argv)


def run(name: str, limits: Limits, argv: list[str]) -> int:
    """Run `argv` in a cgroup of its own until it exits; the cgroup goes with it."""
    box = Cgroups().create(f"{name}-p{os.getpid()}", limits)
    if isinstance(box, SystemdScope):
        os.execvp(box.tool, box.wrap(argv, collect=True))  # systemd cleans up
    child = subprocess.Popen(box.wrap(argv))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    try:
        code = child.wait()
    finally:
        box.kill()
        box.remove()
    return 128 - code if code < 0 else code


def main(args: list[str]) -> int:
    usage = (
        "usage: limits.py probe | join PID -- ARGV | run --name NAME --memory-bytes N "
        "--pids N --cpus N [--disk-bytes N] -- ARGV"
    )
    if args[:1] == ["probe"]:
        print(json.dumps(probe()))
        return 0
    if "--" not in args or len(args) < 3:
        print(usage, file=sys.stderr)
        return 2
    split = args.index("--")
    head, argv = args[:split], args[split + 1 :]
    if head[0] == "join" and len(head) == 2 and head[1].isdigit() and argv:
        join(int(head[1]), argv)
    if head[0] == "run" and argv:
        options = dict(zip(head[1::2], head[2::2], strict=True))
        try:
            limits = Limits.parse(
                {
                    "memory_bytes": int(options["--memory-bytes"]),
                    "pids": int(options["--pids"]),
                    "cpus": float(options["--cpus"]),
                    "disk_bytes": int(options["--disk-bytes"])
                    if "--disk-bytes" in options
                    else None,
                }
            )
            return run(options["--name"], limits, argv)
        except (KeyError, ValueError) as exc:
            print(f"{usage}\n{exc}", file=sys.stderr)
            return 2
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
