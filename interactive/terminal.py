"""Terminals inside a running job: a shell (or one command) where the job's command runs.

The websocket consumer (interactive/terminal_consumers.py) checks `job.exec` and relays bytes;
this module starts the process and moves its bytes, the same way for both backends:

* Local: a pty whose shell enters the namespaces of the job's sandbox (see
  executor/sandbox.py). The executor's command is ``nsenter --net … bwrap …``; bwrap's
  child is pid 1 of the job's PID namespace, in its mount, IPC, UTS, network and cgroup
  namespaces. ``nsenter --target <that child>`` joins all of them and its root, then
  ``setpriv`` drops to the job's uid with no capabilities, an empty bounding set and
  ``no_new_privs``, exactly as the job's command runs. So the shell sees what the job
  sees (its workdir at /job, the runtime, /usr) and nothing of Gantry or other jobs, and
  it dies with the job: when pid 1 of a PID namespace exits the kernel kills the rest.
  It joins the command's cgroup first (``executor/cgroups.py join``), so what it runs
  counts in the job's memory, CPU and process limits.
  A job that was started without a sandbox (no root, no bubblewrap: one tenant only, see
  jobs/compute/sandbox.py) gets a shell as the job ran: in its workdir, as Gantry's
  user, with none of Gantry's environment.
* Kubernetes: the exec API (``kubernetes.stream``) into the worker's pod, with a tty.

A session's interface: ``start()``, ``output`` (an asyncio queue of bytes, ``None`` at
the end), ``write(data)``, ``resize(cols, rows)``, ``wait()`` (the exit code) and
``close()`` (ends the process, idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import termios
import threading
from pathlib import Path

from django.db import close_old_connections

from jobs.compute import sandbox
from jobs.compute.local import LocalBackend, process_matches

# The shell a terminal runs: bash where the image (or /usr) has it, else sh.
SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null; then exec bash -i; else exec sh -i; fi"]
WORKDIR = "/job"  # executor.sandbox.WORKDIR
PYTHONPATH = "/run/gantry/python"  # executor.sandbox.PYTHONPATH
READ_BYTES = 65536


class TerminalError(Exception):
    """A terminal cannot be opened; the message is shown to the user."""


def exit_status(returncode: int) -> int:
    """A shell's convention: 128 + the signal for a process a signal ended."""
    return 128 - returncode if returncode < 0 else returncode


def open_session(job, worker, command: list[str] | None):
    """The session for `command` (None: an interactive shell) in one worker of a job."""
    if job.backend == "kubernetes":
        return KubernetesSession(job, worker, command)
    return LocalSession(job, worker, command)


# --- local ------------------------------------------------------------------------------


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _namespace(pid: int | str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def sandbox_pid(command_pid: int) -> int | None:
    """The host pid of a process inside the job's sandbox: the child of bwrap (the
    command's pid, as the executor started it) that lives in other mount and PID
    namespaces than ours. None when the command was not sandboxed."""
    ours = (_namespace("self", "mnt"), _namespace("self", "pid"))
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or _ppid(int(entry)) != command_pid:
            continue
        theirs = (_namespace(entry, "mnt"), _namespace(entry, "pid"))
        if None not in theirs and theirs[0] != ours[0] and theirs[1] != ours[1]:
            return int(entry)
    return None


def _is_bwrap(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "bwrap"
    except OSError:
        return False


def sandboxed_argv(target: int, uid: int, command: list[str]) -> list[str]:
    """Enter every namespace of the sandbox process `target` and its root, start in the
    job's workdir, drop to the job's user as the job's command did (executor/sandbox.py)."""
    nsenter, setpriv = shutil.which("nsenter"), shutil.which("setpriv")
    if not (nsenter and setpriv):
        raise TerminalError("nsenter and setpriv (util-linux) are needed for a terminal here")
    return [
        nsenter,
        f"--target={target}",
        "--mount",
        "--uts",
        "--ipc",
        "--net",
        "--pid",
        "--cgroup",
        "--root",
        f"--wdns={WORKDIR}",
        "--",
        # Inside the sandbox's root: /usr/bin/setpriv, the same binary bwrap's command used.
        "/usr/bin/setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        *command,
    ]


def terminal_env(job, worker, *, sandboxed: bool, path_first: str | None) -> dict[str, str]:
    """The job's own variables (its parameters, GPUs, thread limits) and a terminal's:
    nothing of Gantry's environment (secret key, database URL) goes in."""
    from jobs.compute import get_backend

    env = {
        k: v
        for k, v in get_backend("local").environment(job, worker).items()
        if k != "JUPYTER_TOKEN"
    }
    path = "/usr/local/bin:/usr/bin:/bin"
    env.update(
        {
            "PATH": f"{path_first}:{path}" if path_first else path,
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "USER": "gantry-job",
            "LOGNAME": "gantry-job",
            "HOME": WORKDIR if sandboxed else worker.workdir,
            "PS1": r"\w\$ ",
        }
    )
    if sandboxed:
        env.update({"TMPDIR": "/tmp", "PYTHONPATH": env.get("PYTHONPATH", PYTHONPATH)})
    return env


def set_window(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class LocalSession:
    """A pty running a shell or one command in a local job's sandbox."""

    def __init__(self, job, worker, command: list[str] | None):
        self.job, self.worker, self.command = job, worker, command
        self.output: asyncio.Queue = asyncio.Queue()
        self.proc: subprocess.Popen | None = None
        self.master: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def argv_and_env(self) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) for the terminal's process; TerminalError when the job's
        command is not running."""
        worker = self.worker
        if not process_matches(worker.child_pid, worker.child_start_time):
            raise TerminalError(f"worker {worker.rank}'s command is not running")
        command = self.command or SHELL
        python_bin = str(Path(LocalBackend.interpreter(self.job.runtime)).parent)
        target = sandbox_pid(worker.child_pid)
        if target is None and (sandbox.sandbox_status().available or _is_bwrap(worker.child_pid)):
            # Never a shell outside a sandboxed job's sandbox.
            raise TerminalError(f"worker {worker.rank}'s sandbox was not found; try again")
        if target is not None:
            if os.geteuid() != 0:
                raise TerminalError(
                    "Gantry's web process must run as root to enter a job's sandbox"
                )
            env = terminal_env(self.job, worker, sandboxed=True, path_first=python_bin)
            argv = sandboxed_argv(target, sandbox.job_uid(self.job), command)
            return sandbox.in_job_cgroup(worker.child_pid, argv), env, "/"
        env = terminal_env(self.job, worker, sandboxed=False, path_first=python_bin)
        return list(command), env, worker.workdir

    async def start(self, cols: int = 80, rows: int = 24) -> None:
        argv, env, cwd = self.argv_and_env()
        self.loop = asyncio.get_running_loop()
        master, slave = os.openpty()
        try:
            set_window(slave, cols, rows)
            if self.command:
                # One command's output goes to a program, not a screen: no \r\n, no
                # echo. Input stays line by line, so ^D ends it (`cmds | gantry shell`).
                attrs = termios.tcgetattr(slave)
                attrs[1] &= ~termios.OPOST
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
            # setsid --ctty: a session of its own with the pty as its controlling
            # terminal, so ^C reaches the foreground job and bash has job control.
            self.proc = subprocess.Popen(
                [shutil.which("setsid") or "setsid", "--ctty", "--wait", *argv],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=env,
                close_fds=True,
            )
        except OSError as exc:
            os.close(master)
            raise TerminalError(f"the terminal could not be started: {exc}") from exc
        finally:
            os.close(slave)
        self.master = master
        os.set_blocking(master, False)
        self.loop.add_reader(master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.master, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:  # EIO: every process holding the pty's other side has gone
            data = b""
        if data:
            self.output.put_nowait(data)
            return
        self.loop.remove_reader(self.master)
        self.output.put_nowait(None)

    def write(self, data: bytes) -> None:
        if self.master is None:
            return
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view) :]
            except BlockingIOError:
                # The program reads no input: keep what fits, drop the rest (a
                # terminal that blocks would hold up the event loop).
                return
            except OSError:
                return

    def resize(self, cols: int, rows: int) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                set_window(self.master, cols, rows)
                if self.proc is not None:
                    os.kill(self.proc.pid, signal.SIGWINCH)

    async def wait(self) -> int:
        return exit_status(await asyncio.to_thread(self.proc.wait))

    def close(self) -> None:
        """Hang up: the shell (its session) gets SIGHUP, then SIGKILL if it lingers."""
        if self.master is not None:
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(self.master)
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None
            self.output.put_nowait(None)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGHUP)
            threading.Timer(2.0, self._kill).start()

    def _kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# --- Kubernetes -------------------------------------------------------------------------

STDIN, STDOUT, STDERR, RESIZE = 0, 1, 2, 4  # the exec API's channels


def exec_request(namespace: str, pod: str, command: list[str] | None) -> dict:
    """The arguments of `kubernetes.stream.stream(connect_get_namespaced_pod_exec, …)`:
    the executor's container, a tty (one stream: stdout), stdin, bytes not text."""
    from jobs.compute.kubernetes.manifests import CONTAINER

    return {
        "name": pod,
        "namespace": namespace,
        "container": CONTAINER,
        "command": list(command or SHELL),
        "stdin": True,
        "stdout": True,
        "stderr": True,
        "tty": True,
        "binary": True,
        "_preload_content": False,
    }


def worker_pod(job, rank: int) -> tuple[object, str, str]:
    """(connection, namespace, pod name) of a running worker's pod."""
    from jobs.compute import get_backend
    from jobs.compute.kubernetes import manifests as m
    from jobs.compute.kubernetes.backend import spec_from_job
    from jobs.compute.kubernetes.watch import pod_rank

    backend = get_backend("kubernetes")
    ref, namespace, _ = backend.attempt_objects(job)
    conn = backend.connection(ref)
    selector = ",".join(f"{k}={v}" for k, v in m.selector(spec_from_job(job)).items())
    pods = conn.core.list_namespaced_pod(
        namespace, label_selector=selector, _request_timeout=conn.timeout
    ).items
    for pod in pods:
        if pod_rank(pod) == rank and (pod.status and pod.status.phase == "Running"):
            return conn, namespace, pod.metadata.name
    raise TerminalError(f"worker {rank} has no running pod")


def pod_from_thread(job, rank: int) -> tuple[object, str, str]:
    """worker_pod from a thread outside Django's request cycle (asyncio.to_thread): its
    database connection is handed back afterwards (to the pool, on PostgreSQL), or every
    terminal opened would keep one for good."""
    try:
        return worker_pod(job, rank)
    finally:
        close_old_connections()


class KubernetesSession:
    """The exec API's websocket to the worker's pod, pumped by a thread."""

    def __init__(self, job, worker, command: list[str] | None):
        self.job, self.worker, self.command = job, worker, command
        self.output: asyncio.Queue = asyncio.Queue()
        self.client = None
        self.done: asyncio.Future | None = None
        self.stopped = threading.Event()

    async def start(self, cols: int = 80, rows: int = 24) -> None:
        from kubernetes.stream import stream

        from jobs.compute.kubernetes.client import describe_error

        def connect():
            conn, namespace, pod = pod_from_thread(self.job, self.worker.rank)
            try:
                return stream(
                    conn.core.connect_get_namespaced_pod_exec,
                    **exec_request(namespace, pod, self.command),
                )
            except Exception as exc:
                raise TerminalError(describe_error(exc, conn.ref.name)) from exc

        loop = asyncio.get_running_loop()
        self.client = await asyncio.to_thread(connect)
        self.resize(cols, rows)
        self.done = loop.create_future()
        threading.Thread(target=self._pump, args=(loop,), daemon=True).start()

    def _pump(self, loop) -> None:
        client, code = self.client, 1
        try:
            while client.is_open() and not self.stopped.is_set():
                client.update(timeout=0.5)
                for channel in (STDOUT, STDERR):
                    data = client.read_channel(channel) if client.peek_channel(channel) else b""
                    if data:
                        data = data.encode() if isinstance(data, str) else data
                        loop.call_soon_threadsafe(self.output.put_nowait, data)
            with contextlib.suppress(Exception):
                code = client.returncode if client.returncode is not None else 137
        finally:
            loop.call_soon_threadsafe(self.output.put_nowait, None)
            loop.call_soon_threadsafe(lambda: self.done.done() or self.done.set_result(code))

    def write(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            self.client.write_channel(STDIN, data)

    def resize(self, cols: int, rows: int) -> None:
        with contextlib.suppress(Exception):
            self.client.write_channel(RESIZE, json.dumps({"Width": cols, "Height": rows}))

    async def wait(self) -> int:
        return await self.done

    def close(self) -> None:
        self.stopped.set()
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
