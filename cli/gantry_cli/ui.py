"""What the commands share: consoles, errors as exit codes, tables, JSON and progress bars."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from gantry_cli import sdk
from gantry_cli.sdk import Gantry, GantryError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def fail(exc: GantryError | str, code: int | None = None) -> NoReturn:
    err.print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
    exit_code = code if code is not None else getattr(exc, "exit_code", sdk.EXIT_REJECTED)
    raise typer.Exit(exit_code)


@contextlib.contextmanager
def errors_as_exit_codes() -> Iterator[None]:
    """A GantryError ends the command with its message and exit code; Ctrl-C with 130."""
    try:
        yield
    except GantryError as exc:
        fail(exc)
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None


def connect() -> Gantry:
    """The configured server, or exit 3 saying how to sign in."""
    try:
        return Gantry.from_config()
    except GantryError as exc:
        fail(exc)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


def table(rows: list[dict], columns: list[tuple[str, str]], empty: str) -> None:
    """`columns`: (header, key) pairs; values formatted for people."""
    if not rows:
        out.print(empty)
        return
    view = Table(box=None, pad_edge=False, header_style="bold")
    for header, _ in columns:
        view.add_column(header, overflow="fold")
    for row in rows:
        view.add_row(*(display(row.get(key)) for _, key in columns))
    out.print(view)


SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(n: float) -> str:
    """Bytes as Gantry's pages write them (core/formatting.py `format_size`): binary units,
    one decimal (rounded half up) above 1 KiB; "1.0 MiB", never "1024.0 KiB"."""

    def tenths(x: float) -> float:
        return math.floor(x * 10 + 0.5) / 10

    sign, size = ("-" if n < 0 else ""), abs(float(n))
    if size < 1024:
        return f"{sign}{math.floor(size + 0.5)} B"
    unit = 0
    while size >= 1024 and unit < len(SIZE_UNITS) - 1:
        size /= 1024
        unit += 1
    if tenths(size) >= 1024 and unit < len(SIZE_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{sign}{tenths(size):.1f} {SIZE_UNITS[unit]}"


def display(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, str) and len(value) >= 20 and value[4:5] == "-" and "T" in value:
        return when(value)
    return str(value)


def when(iso: str) -> str:
    """An API timestamp as a relative time ("3 min ago", "in 2 h")."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    seconds = (moment - datetime.now(UTC)).total_seconds()
    ahead, seconds = seconds > 0, abs(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            text = f"{seconds / size:.0f} {unit}"
            break
    else:
        text = f"{seconds:.0f} s"
    return f"in {text}" if ahead else f"{text} ago"


class Bar:
    """A Rich progress bar on stderr fed by `(total, sent)` calls (the transfer modules'
    callback): the first call with a total sizes it; hidden with --quiet or off a tty."""

    def __init__(self, description: str, enabled: bool = True):
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=False,
            disable=not enabled,
        )
        self.task = self.progress.add_task(description, total=None)

    def __call__(self, total: int, sent: int) -> None:
        if total:
            self.progress.update(self.task, total=total)
        if sent:
            self.progress.advance(self.task, sent)

    def __enter__(self) -> Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()
