"""A job worker's hard limits: memory, processes, CPU and disk (standard library only).

The rule: every process of a sandboxed worker — its command and all it starts, a
terminal opened in it, its TensorBoard while it runs — is in one cgroup of its own, which
the kernel holds to the worker's request; the executor stays outside it, so a job at its
limits takes down neither the executor nor Gantry.

* Memory: ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1), and no swap for the job
  (``memory.swap.max`` 0, ``memory.memsw.limit_in_bytes``). Past it the kernel's OOM
  killer acts inside that cgroup only (v2: on the whole cgroup at once,
  ``memory.oom.group``); ``memory.events`` / ``memory.oom_control`` (``oom_kill``) tell
  the executor afterwards, and the job's reason starts "out of memory".
* Processes: ``pids.max`` (threads count too: the kernel counts tasks); a fork or a
  thread past it fails with EAGAIN.
* CPU: ``cpu.max`` (v2) or ``cpu.cfs_quota_us`` (v1): the job's CPUs' worth of time per
  100 ms, however wide the affinity it gives itself.
* Disk: the executor adds up what the job's user owns in its working directory (links
  never followed, each file at least one block) every few seconds and stops the job
  past its limit; RLIMIT_FSIZE stops any single file just past it at once.

The cgroup (systemd scope, v2 or v1, whichever this machine has) is cgroups.py's
business; this module holds what the executor does around one command: make the cgroup
before it starts, watch the disk while it runs, and afterwards say whether a limit
ended it ("out of memory: …", "disk limit exceeded: …"), kill what is left of it and
remove the cgroup. Notebooks (JupyterLab and its kernels are the command), terminals and
TensorBoard (interactive/terminal.py, interactive/tensorboard.py join the running command's cgroup)
count in the same limits.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time

from .cgroups import Cgroup, Cgroups, Limits, SystemdScope

# Each file counts at least this much: a million empty files fill a disk too.
MIN_FILE_BYTES = 4096
# The disk is added up at most this often, and never taking over a tenth of a core.
DISK_SCAN_SECONDS = 1.0

# --- disk ---------------------------------------------------------------------------------


def disk_usage(root: str, uid: int | None) -> int:
    """Bytes the files of `uid` (any owner: None) take under `root`, through descriptors
    (executor/safefs.py: a link is never followed, a folder swapped for one is never
    opened); hard links count once, each file at least MIN_FILE_BYTES."""
    from .safefs import Dir

    total, seen = 0, set()
    try:
        top = Dir.workdir(root)
    except OSError:
        return 0
    with top:
        for _, st in top.walk():
            if uid is not None and st.st_uid != uid:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += max(st.st_blocks * 512, MIN_FILE_BYTES)
    return total


def _size(n: int) -> str:
    try:
        from .staging import _human  # the size formatter of Gantry's pages
    except ImportError:  # run as a program
        return f"{n} bytes"
    return _human(n)


# --- what the executor holds for one command ----------------------------------------------


class JobLimits:
    """A sandboxed command's cgroup (made before it starts), the disk watch (while it
    runs) and, once it ended, whether a limit ended it and why. Without limits (no
    sandbox, or none asked for) every step does nothing."""

    def __init__(self, cgroup: Cgroup | None = None, uid: int | None = None, roots=()) -> None:
        self.cgroup, self.uid, self.roots = cgroup, uid, list(roots)
        self.disk_over: str | None = None
        self.oom_kills = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._done = False

    @classmethod
    def for_sandbox(cls, box: dict, job_id: str, worker: int, workdir: str) -> JobLimits:
        """The limits of a worker's sandbox spec (executor/sandbox.py), their cgroup made;
        LimitsError (an OSError) when it cannot be: the command must then not start."""
        if not box.get("limits"):
            return cls()
        limits = Limits.parse(box["limits"])
        name = f"job-{job_id}-w{worker}-p{os.getpid()}"  # -p: whose (see cgroups._sweep)
        roots = [workdir, *([box["shm"]] if box.get("shm") else [])]
        return cls(Cgroups().create(name, limits), box["uid"], roots)

    @property
    def limits(self) -> Limits:
        assert self.cgroup is not None
        return self.cgroup.limits

    def wrap(self, argv: list[str]) -> list[str]:
        return argv if self.cgroup is None else self.cgroup.wrap(argv)

    def watch(self) -> None:
        """Start adding up the disk every few seconds; past the limit, kill the job."""
        if self.cgroup is None:
            return
        if self.limits.disk_bytes is None and not isinstance(self.cgroup, SystemdScope):
            return
        self._thread = threading.Thread(target=self._watch, name="limits", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        wait = DISK_SCAN_SECONDS
        while not self._stop.wait(wait):
            started = time.monotonic()
            if isinstance(self.cgroup, SystemdScope):
                self.cgroup.sample()
            if self._check_disk():
                self.disk_over += "; the job was stopped"
                self.cgroup.kill()
                return
            wait = max(DISK_SCAN_SECONDS, 10 * (time.monotonic() - started))

    def _check_disk(self) -> bool:
        """Whether the job is over its disk limit (then `disk_over` says by how much)."""
        limit = self.limits.disk_bytes
        if limit is None or self.disk_over is not None:
            return self.disk_over is not None
        try:
            used = sum(disk_usage(root, self.uid) for root in self.roots if os.path.isdir(root))
        except (OSError, RecursionError) as exc:
            self.disk_over = f"disk limit: the working directory cannot be added up ({exc!r})"
            return True
        if used > limit:
            self.disk_over = (
                f"disk limit exceeded: the job's files took {_size(used)} in its working "
                f"directory, over its limit of {_size(limit)}"
            )
        return self.disk_over is not None

    def stop(self) -> None:
        """The command ended: a last disk check, the OOM count, whatever is left of the job
        killed, its cgroup removed (once; errors are reported, never raised)."""
        if self._done or self.cgroup is None:
            return
        self._done = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._check_disk()
        self.oom_kills = self.cgroup.oom_kills()
        self.cgroup.kill()
        try:
            self.cgroup.remove()
        except OSError as exc:
            print(f"gantry-executor: cannot remove the job's cgroup: {exc}", file=sys.stderr)

    def verdict(self, returncode: int) -> str | None:
        """Why a limit ended the command (after `stop`), or None."""
        if self.cgroup is None:
            return None
        if self.disk_over is not None:
            return self.disk_over
        if self.oom_kills and returncode != 0:
            return (
                f"out of memory: the job went over its memory limit of "
                f"{_size(self.limits.memory_bytes)} and the kernel killed it "
                f"(OOM kill in its {self.cgroup.kind})"
            )
        return None
