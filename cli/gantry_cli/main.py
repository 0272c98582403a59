"""The `gantry` command (Typer). Each command is a thin layer over gantry_cli.sdk.

Other modules register their commands here with one line each, e.g.
`app.command("shell")(shell.shell)`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from gantry_cli import sdk
from gantry_cli.sdk import Gantry, GantryError

app = typer.Typer(
    name="gantry",
    help="Gantry from your terminal: send code, run jobs, follow their logs, move data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def connect() -> Gantry:
    """The configured server, or exit 3 saying how to sign in."""
    try:
        return Gantry.from_config()
    except GantryError as exc:
        fail(exc)


def fail(exc: GantryError | str, code: int | None = None) -> typer.Exit:
    message = str(exc)
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True, soft_wrap=True)
    exit_code = code if code is not None else getattr(exc, "exit_code", sdk.EXIT_REJECTED)
    raise typer.Exit(exit_code)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


@app.command()
def login(
    url: Annotated[str, typer.Option(help="Gantry's address", prompt="Gantry URL")] = "",
    token: Annotated[
        str,
        typer.Option(
            help="A personal API token (Settings → API tokens); read from $GANTRY_TOKEN if set",
            envvar="GANTRY_TOKEN",
            prompt="API token",
            hide_input=True,
        ),
    ] = "",
) -> None:
    """Check a URL and token against the server and keep them (mode 0600)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        fail(f"{url!r} is not an http(s) URL", sdk.EXIT_USAGE)
    g = Gantry(url, token.strip())
    try:
        me = g.me()
    except GantryError as exc:
        if exc.status in (401, 403):
            fail(f"{url} refused this token: {exc}", sdk.EXIT_AUTH)
        if exc.status == 404:
            fail(f"{url} does not answer like a Gantry server (no /api/v1/me/)", sdk.EXIT_USAGE)
        fail(exc)
    path = sdk.write_config(url, token.strip())
    out.print(f"Signed in to {url} as [bold]{me['username']}[/bold] (saved in {path})")


@app.command()
def whoami(as_json: JsonFlag = False) -> None:
    """Who the configured token belongs to, on which server."""
    g = connect()
    try:
        me = g.me()
    except GantryError as exc:
        fail(exc)
    if as_json:
        print_json({**me, "url": g.url})
    else:
        out.print(f"{me['username']} on {g.url}")


def main() -> None:  # pragma: no cover - `python -m gantry_cli`
    app(prog_name=os.path.basename(sys.argv[0]) or "gantry")
