"""TensorBoard for a job's logdir, served on the job's notebook origin.

A job that wrote TensorBoard event files (``*tfevents*``) in its working directory (rank
0's) gets "Open TensorBoard" on its page, running or finished. The button goes through
the notebook hand-off (`interactive.proxy`: a ticket, the origin's own session, `job.exec` on
every request) to ``<notebook origin>/jobs/<id>/tensorboard/``, which the origin relays
to a TensorBoard server of that job. Gantry's cookies never reach it, as with notebooks.

The server parses files the job's code wrote, so it is treated as the job's code: it
runs `tensorboard_server.py` in a bubblewrap sandbox of its own, as the job's user, with
no network (``--unshare-net``: loopback only), seeing the logdir read-only at /logs and
nothing of Gantry, other jobs or the host beyond /usr, the interpreter and a few /etc
files. While the job runs, it runs in the cgroup of rank 0's command and counts in the
job's limits; for a finished job it gets a cgroup of its own held to the job's memory,
CPUs and processes (jobs/compute/sandbox.py: in_job_cgroup, in_own_cgroup). It listens on a Unix socket in a directory only that user may enter (the origin,
root, connects to it as to a notebook's: `proxy.open_notebook_socket` checks the owner).
Gantry never imports tensorboard: it is a subprocess under GANTRY_TENSORBOARD_PYTHON.

It is started on demand by the first request that finds it down (the origin then shows
"starting" and reloads), and stops itself after GANTRY_TENSORBOARD_IDLE_MINUTES without
a request, or when the origin shuts down (`stop_servers`: nothing Gantry started outlives
`manage.py serve`). Kubernetes jobs have no local logdir, so no TensorBoard here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render

from interactive import proxy
from jobs.compute import sandbox
from jobs.compute.local import process_matches, process_start_time, process_tree, stop_processes

EVENT_MARK = "tfevents"  # TensorBoard event files: events.out.tfevents.<time>.<host>...
SCAN_LIMIT = 5000  # entries looked at before giving up on finding one
SOCKET = "tensorboard.sock"
SERVER_SCRIPT = Path(__file__).with_name("tensorboard_server.py")
INSIDE_SCRIPT = "/run/gantry/tensorboard_server.py"
INSIDE_LOGS = "/logs"
INSIDE_RUN = "/run/tensorboard"


def base_url(pk: int) -> str:
    return f"/jobs/{int(pk)}/tensorboard/"


def board_url(pk: int) -> str:
    """TensorBoard of job `pk` on its origin."""
    return proxy.notebook_origin(pk) + base_url(pk)


def logdir(job) -> Path | None:
    """Rank 0's working directory, when this machine holds it."""
    from jobs.models import JobWorker

    if job.backend != "local":
        return None
    worker = JobWorker.objects.filter(job=job, rank=0).first()
    if worker is None or not worker.workdir:
        return None
    path = Path(worker.workdir)
    return path if path.is_dir() else None


def has_event_files(job) -> bool:
    """Whether the job's logdir holds a TensorBoard event file. Gantry reads the job's
    folder by descriptor, one folder at a time with O_NOFOLLOW: a folder the job swaps
    for a link while it is scanned is refused, never followed (executor/safefs.py)."""
    root = logdir(job)
    if root is None:
        return False
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        pending = [os.open(root, flags)]
    except OSError:
        return False
    seen = 0
    try:
        while pending:
            fd = pending.pop()
            try:
                for entry in os.scandir(fd):
                    seen += 1
                    if seen > SCAN_LIMIT:
                        return False
                    if not entry.is_dir(follow_symlinks=False):
                        if EVENT_MARK in entry.name:
                            return True
                    elif entry.name != ".gantry":
                        with contextlib.suppress(OSError):  # a link now: not entered
                            pending.append(os.open(entry.name, flags, dir_fd=fd))
            finally:
                os.close(fd)
    finally:
        for fd in pending:
            os.close(fd)
    return False


def run_dir(job) -> Path:
    return Path(settings.GANTRY_JOBS_DIR) / "_tensorboard" / str(job.pk)


def server_uid(job) -> int:
    """Whose TensorBoard it is: the job's user when sandboxed, Gantry's otherwise."""
    return sandbox.job_uid(job) if sandbox.sandbox_status().available else os.getuid()


def tensorboard_target(job) -> proxy.NotebookTarget | None:
    """Where the origin relays /jobs/<id>/tensorboard/ (None: no event files here),
    starting the server when it is not answering (it may still be starting then)."""
    root = logdir(job)
    if root is None:
        return None
    rundir = run_dir(job)
    target = proxy.NotebookTarget(
        "localhost", 0, "", base_url(job.pk), uds=str(rundir / SOCKET), uid=server_uid(job)
    )
    if not answering(target):
        if not has_event_files(job):
            return None
        start(job, root, rundir, target.uid)
    return target


def answering(target: proxy.NotebookTarget) -> bool:
    try:
        fd = proxy.open_notebook_socket(target)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1)
            sock.connect(f"/proc/self/fd/{fd}")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def start(job, root: Path, rundir: Path, uid: int) -> int | None:
    """Start the job's TensorBoard unless one is already starting; its pid (or None)."""
    rundir.parent.mkdir(parents=True, exist_ok=True)
    pidfile = rundir.parent / f"{job.pk}.pid"
    with open(rundir.parent / f"{job.pk}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError, KeyError):
            known = json.loads(pidfile.read_text())
            if process_matches(known["pid"], known["start"]):
                return None
        rundir.mkdir(exist_ok=True)
        os.chown(rundir, uid, uid)
        os.chmod(rundir, 0o700)
        python = settings.GANTRY_TENSORBOARD_PYTHON or sys.executable
        with open(rundir.parent / f"{job.pk}.log", "ab") as log:
            process = subprocess.Popen(
                limited(job, server_argv(job, python, root, rundir, uid)),
                cwd=rundir,
                env=_environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        pidfile.write_text(
            json.dumps({"pid": process.pid, "start": process_start_time(process.pid)})
        )
        return process.pid


def limited(job, argv: list[str]) -> list[str]:
    """`argv` held to the job's limits: in rank 0's cgroup while its command runs, else in
    a cgroup of its own with the same limits."""
    from jobs.models import JobWorker

    worker = JobWorker.objects.filter(job=job, rank=0).first()
    if worker is not None and process_matches(worker.child_pid, worker.child_start_time):
        return sandbox.in_job_cgroup(worker.child_pid, argv)
    return sandbox.in_own_cgroup(job, "tensorboard", argv)


def stop_servers(grace: float = 3.0) -> int:
    """Stop every TensorBoard server started on this machine (its pid file names it) and
    every process under it, SIGKILL after `grace` seconds what did not stop; the number
    of servers stopped. Sandboxed, the server's python runs in a PID namespace and a
    session of its own under bwrap, so the tree is found by parent, not by group."""
    victims: list[tuple[int, int]] = []
    servers = 0
    for pidfile in (Path(settings.GANTRY_JOBS_DIR) / "_tensorboard").glob("*.pid"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            known = json.loads(pidfile.read_text())
            if process_matches(known["pid"], known["start"]):
                servers += 1
                victims += process_tree(known["pid"])
            pidfile.unlink()
    stop_processes(victims, grace)
    return servers


def _environment() -> dict[str, str]:
    return dict(sandbox.SERVER_ENVIRONMENT)


def server_argv(job, python: str, root: Path, rundir: Path, uid: int) -> list[str]:
    """The command line of the job's TensorBoard: sandboxed where jobs are."""
    idle = str(settings.GANTRY_TENSORBOARD_IDLE_MINUTES * 60)
    prefix = base_url(job.pk).rstrip("/")
    status = sandbox.sandbox_status()
    if not status.available:
        # The socket by a name relative to the server's working directory, `rundir`: a Unix
        # socket's path may not exceed 107 bytes, and a data directory can be deep.
        return [python, str(SERVER_SCRIPT), SOCKET, str(root), prefix, idle]
    binds = ["--ro-bind", str(SERVER_SCRIPT), INSIDE_SCRIPT]
    binds += ["--ro-bind", str(root), INSIDE_LOGS, "--bind", str(rundir), INSIDE_RUN]
    if (root / ".gantry").is_dir():  # the executor's state: nothing for TensorBoard
        binds += ["--tmpfs", f"{INSIDE_LOGS}/.gantry"]
    command = [INSIDE_SCRIPT, f"{INSIDE_RUN}/{SOCKET}", INSIDE_LOGS, prefix, idle]
    return sandbox.server_sandbox(status, python, uid, binds, command)


# --- Gantry's side: the button's target ---------------------------------------------------


def tensorboard_open(request, pk: int):
    """Send a user who may exec in job `pk` into its TensorBoard with a ticket (the
    notebook hand-off of `interactive.proxy.notebook_open`, landing on /jobs/<id>/tensorboard/)."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    job = proxy.get_job_for_exec(request.user, pk)
    if request.GET.get("panel"):  # the job page's panel (htmx): the button, when it applies
        context = {"has_events": has_event_files(job), "job_pk": job.pk}
        return render(request, "interactive/_job_tensorboard_panel.html", context)
    if not has_event_files(job):
        raise Http404("This job has written no TensorBoard event files.")
    state = request.GET.get("state", "")
    if not proxy._STATE.fullmatch(state):
        return HttpResponseRedirect(board_url(job.pk))
    ticket = proxy.mint_ticket(request.user, job, state, "", app="tensorboard")
    response = HttpResponseRedirect(
        f"{proxy.notebook_origin(job.pk)}{proxy.ENTER_PATH}?{urlencode({'ticket': ticket})}"
    )
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


# For the generated access tests: the rule this view applies.
tensorboard_open.permission_action = "job.exec"
tensorboard_open.model_label = "jobs.Job"
