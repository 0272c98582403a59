"""`gantry shell JOB` and `gantry exec JOB -- CMD`: a terminal inside a running job.

The server's side is interactive/terminal_consumers.py: ``ws(s)://<host>/ws/jobs/<id>/terminal/
?worker=<rank>[&command=<JSON list>]``, signed in by ``Authorization: Bearer <token>``.
Binary frames carry the terminal's bytes both ways; text frames are JSON: ours
``{"resize": [cols, rows]}``, the server's ``{"error": "..."}`` (a refusal, before the
close code) and ``{"exit": <code>}`` (the process ended).

`shell` puts the local terminal in raw mode (every key goes to the remote shell, ^C
included), follows window size changes (SIGWINCH) and restores the terminal on the way
out; it exits with the shell's exit code. `exec` runs one command (no stdin: it is for
scripts, like `docker exec` without -i), prints its output as it comes and exits with
its exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from typing import Annotated
from urllib.parse import urlencode, urlsplit, urlunsplit

import typer
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect as ws_connect

from gantry_cli import sdk
from gantry_cli.sdk import Gantry, GantryError
from gantry_cli.ui import connect, errors_as_exit_codes, fail

# The server's close codes (interactive/terminal_consumers.py): what to say, how to exit.
REFUSALS = {
    4400: ("the server refused the request", sdk.EXIT_USAGE),
    4401: ("the server does not accept this token", sdk.EXIT_AUTH),
    4403: ("you may not open a terminal in this job", sdk.EXIT_FORBIDDEN),
    4404: ("no such job (or not yours)", sdk.EXIT_NOT_FOUND),
    4409: ("the job is not running", sdk.EXIT_REJECTED),
}


def window_size() -> tuple[int, int]:
    """(cols, rows) of the terminal we run in (not $COLUMNS: it does not follow resizes)."""
    for stream in (sys.stdin, sys.stdout):
        with contextlib.suppress(OSError, ValueError):
            size = os.get_terminal_size(stream.fileno())
            return size.columns, size.lines
    size = shutil.get_terminal_size()
    return size.columns, size.lines


def terminal_url(
    base: str, job_id: int, worker: int, command: list[str] | None, size: tuple[int, int]
) -> str:
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    query: dict = {"worker": worker, "cols": size[0], "rows": size[1]}
    if command:
        query["command"] = json.dumps(command)
    path = parts.path.rstrip("/") + f"/ws/jobs/{int(job_id)}/terminal/"
    return urlunsplit((scheme, parts.netloc, path, urlencode(query), ""))


def open_terminal(g: Gantry, job_id: int, worker: int, command: list[str] | None):
    url = terminal_url(g.url, job_id, worker, command, window_size())
    parts = urlsplit(g.url)
    try:
        return ws_connect(
            url,
            additional_headers={"Authorization": f"Bearer {g.token}"},
            origin=f"{parts.scheme}://{parts.netloc}",
            open_timeout=15,
            max_size=None,
            compression=None,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        raise GantryError(
            f"job {job_id}: the server refused the terminal (HTTP {status})", status
        ) from None
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        raise sdk.Unreachable(f"cannot reach {g.url}: {exc}") from None


class Terminal:
    """One terminal session: relays until the server says the process exited."""

    def __init__(self, socket, job_id: int):
        self.socket, self.job_id = socket, job_id
        self.error = ""

    def run(self) -> int:
        out = sys.stdout.buffer
        try:
            for message in self.socket:
                if isinstance(message, bytes):
                    out.write(message)
                    out.flush()
                    continue
                control = json.loads(message)
                if "exit" in control:
                    return int(control["exit"])
                self.error = control.get("error", self.error)
        except ConnectionClosed:
            pass
        code = self.socket.close_code
        if code in REFUSALS:
            words, exit_code = REFUSALS[code]
            raise RefusedError(f"job {self.job_id}: {self.error or words}", exit_code)
        raise sdk.Unreachable(f"job {self.job_id}: the terminal's connection was lost ({code})")

    def send_keys(self) -> None:
        """stdin to the socket until stdin ends or the socket closes (a daemon thread)."""
        fd = sys.stdin.fileno()
        last = b"\n"
        with contextlib.suppress(OSError, ConnectionClosed):
            while data := os.read(fd, 4096):
                self.socket.send(data)
                last = data[-1:]
            # Input piped in has ended: end it there too (^D; a second one after a
            # last line without its newline), so `cmds | gantry shell JOB` ends.
            self.socket.send(b"\x04" if last == b"\n" else b"\x04\x04")

    def send_size(self, *_args) -> None:
        with contextlib.suppress(OSError, ConnectionClosed):
            self.socket.send(json.dumps({"resize": list(window_size())}))


class RefusedError(GantryError):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@contextlib.contextmanager
def raw_terminal():
    """Raw mode on a terminal stdin (restored afterwards); nothing otherwise."""
    if not sys.stdin.isatty():
        yield
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def shell(
    job: Annotated[int, typer.Argument(help="Job id")],
    worker: Annotated[int, typer.Option("--worker", "-w", help="Worker rank")] = 0,
) -> None:
    """An interactive shell inside a running job (needs the job.exec permission)."""
    g = connect()
    # Commands piped in go to a shell that reads a pipe, not a terminal's line editor
    # (which would take the final ^D for a character, depending on timing).
    command = None if sys.stdin.isatty() else ["sh", "-c", "cat | sh"]
    with errors_as_exit_codes(), open_terminal(g, job, worker, command) as socket:
        terminal = Terminal(socket, job)
        previous = None
        if hasattr(signal, "SIGWINCH"):
            previous = signal.signal(signal.SIGWINCH, terminal.send_size)
        try:
            with raw_terminal():
                threading.Thread(target=terminal.send_keys, daemon=True).start()
                code = terminal.run()
        finally:
            if previous is not None:
                signal.signal(signal.SIGWINCH, previous)
    raise typer.Exit(code)


def exec_(
    job: Annotated[int, typer.Argument(help="Job id")],
    command: Annotated[list[str], typer.Argument(help="The command, after --")],
    worker: Annotated[int, typer.Option("--worker", "-w", help="Worker rank")] = 0,
) -> None:
    """Run one command inside a running job; print its output, exit with its code."""
    words = list(command)
    if words[:1] == ["--"]:  # `gantry exec JOB -- CMD`: the separator reaches us as a word
        words = words[1:]
    if not words:
        fail("give the command after --, e.g. gantry exec 12 -- nvidia-smi", sdk.EXIT_USAGE)
    g = connect()
    with errors_as_exit_codes(), open_terminal(g, job, worker, words) as socket:
        code = Terminal(socket, job).run()
    raise typer.Exit(code)
