"""`gantry sweep ...`: start a hyperparameter sweep from a YAML file, list, show, stop.

The file is the sweep page's document (docs/users/sweeps.md); it is sent as
text and checked by the server, which names the field of any error. Like `run`, `start`
sends the current folder (`--dir`) as the trials' code, unless the template names a
code_snapshot or `--no-code` is given."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from gantry_cli import sdk, snapshot
from gantry_cli.ui import JsonFlag, connect, err, errors_as_exit_codes, fail, out, print_json, table

app = typer.Typer(help="Hyperparameter sweeps: trials run as jobs, pruned early.",
                  no_args_is_help=True)  # fmt: skip


@app.command()
def start(
    file: Annotated[Path, typer.Argument(help="the sweep as YAML or JSON")],
    project: Annotated[str, typer.Option("--project", "-p", help="id, slug or tenant/project")],
    directory: Annotated[Path, typer.Option("--dir", help="The trials' code")] = Path("."),
    no_code: Annotated[bool, typer.Option("--no-code", help="Send no code")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Send this directory's code (git's ignore rules) and start a sweep on it; its first
    trials are submitted at once."""
    try:
        source = file.read_text()
    except OSError as exc:
        fail(f"{file}: {exc.strerror or exc}", sdk.EXIT_USAGE)
    send_code = not no_code and not _names_code(source)
    if send_code and not directory.is_dir():
        fail(f"{directory}: not a directory", sdk.EXIT_USAGE)
    g = connect()
    with errors_as_exit_codes():
        project_id = g.project_id(project)
        body: dict = {"project": project_id, "source": source}
        if send_code:
            uploaded = snapshot.send_folder(g, project_id, directory, quiet=as_json)
            body["code_snapshot"] = uploaded.snapshot["id"]
            if not as_json:
                err.print(uploaded.line())
        sweep = g.client.json("POST", "sweeps/", json=body)
    if as_json:
        print_json(sweep)
        return
    out.print(f"sweep #{sweep['id']} {sweep['name']}: {sweep['state']} — {g.url}{sweep['url']}")


def _names_code(source: str) -> bool:
    """Whether the document's template names its own code_snapshot (the server reads the
    document; a file it cannot read is left for its error message)."""
    try:
        document = yaml.safe_load(source)
    except yaml.YAMLError:
        return False
    template = document.get("template") if isinstance(document, dict) else None
    return isinstance(template, dict) and template.get("code_snapshot") is not None


@app.command("list")
def list_(
    project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sweeps you can see, newest first."""
    g = connect()
    with errors_as_exit_codes():
        params = {"project": g.project_id(project)} if project else {}
        rows = g.client.pages("sweeps/", params, limit=100)
    if as_json:
        print_json(rows)
        return
    columns = [("ID", "id"), ("NAME", "name"), ("STATE", "state"), ("OBJECTIVE", "objective"),
               ("SAMPLER", "sampler"), ("STARTED", "created_at")]  # fmt: skip
    table(rows, columns, "No sweeps yet: `gantry sweep start sweep.yml --project P`.")


@app.command()
def show(sweep_id: int, as_json: JsonFlag = False) -> None:
    """A sweep's state, best trial and trials."""
    g = connect()
    with errors_as_exit_codes():
        sweep = g.client.json("GET", f"sweeps/{sweep_id}/")
    if as_json:
        print_json(sweep)
        return
    out.print(f"sweep #{sweep['id']} {sweep['name']}: {sweep['state']} {sweep['state_reason']}")
    best = sweep.get("best")
    if best:
        params = " ".join(f"{k}={v}" for k, v in best["params"].items())
        out.print(f"best: trial {best['number']} (job #{best['job']}) {sweep['objective']}={best['objective']:.4g} {params}")
    for trial in sweep["trials"]:
        trial["param_text"] = " ".join(f"{k}={v}" for k, v in trial["params"].items())
    columns = [("#", "number"), ("JOB", "job"), ("STATE", "state"), ("OBJECTIVE", "objective"),
               ("PARAMS", "param_text"), ("REASON", "reason")]  # fmt: skip
    table(sweep["trials"], columns, "No trials yet.")


@app.command()
def stop(sweep_id: int, as_json: JsonFlag = False) -> None:
    """Stop a sweep: its running trials are cancelled, none is added."""
    g = connect()
    with errors_as_exit_codes():
        sweep = g.client.json("POST", f"sweeps/{sweep_id}/stop/")
    if as_json:
        print_json(sweep)
        return
    out.print(f"sweep #{sweep['id']}: {sweep['state']} ({sweep['state_reason']})")
