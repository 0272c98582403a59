"""`gantry sweep ...`: start a hyperparameter sweep from a YAML file, list, show, stop.

The file is the sweep page's document (README "Hyperparameter sweeps"); it is sent as
text and checked by the server, which names the field of any error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gantry_cli import sdk
from gantry_cli.ui import JsonFlag, connect, errors_as_exit_codes, fail, out, print_json, table

app = typer.Typer(help="Hyperparameter sweeps: trials run as jobs, pruned early.",
                  no_args_is_help=True)  # fmt: skip


@app.command()
def start(
    file: Annotated[Path, typer.Argument(help="the sweep as YAML or JSON")],
    project: Annotated[str, typer.Option("--project", "-p", help="id, slug or tenant/project")],
    as_json: JsonFlag = False,
) -> None:
    """Start a sweep; its first trials are submitted at once."""
    try:
        source = file.read_text()
    except OSError as exc:
        fail(f"{file}: {exc.strerror or exc}", sdk.EXIT_USAGE)
    g = connect()
    with errors_as_exit_codes():
        sweep = g.client.json("POST", "sweeps/", json={"project": g.project_id(project), "source": source})
    if as_json:
        print_json(sweep)
        return
    out.print(f"sweep #{sweep['id']} {sweep['name']}: {sweep['state']} — {g.url}{sweep['url']}")


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
