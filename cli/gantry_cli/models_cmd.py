"""`gantry models ...`: list, register a job's outputs as a version, alias, predict."""

from __future__ import annotations

from typing import Annotated

import typer

from gantry_cli import sdk
from gantry_cli.sdk import Gantry
from gantry_cli.ui import JsonFlag, connect, errors_as_exit_codes, fail, out, print_json, table

app = typer.Typer(help="The model hub: register versions, move aliases, predict.",
                  no_args_is_help=True)  # fmt: skip


def model_id(g: Gantry, name: str) -> int:
    if name.isdigit():
        return int(name)
    found = [m for m in g.models.list() if m["name"] == name]
    if len(found) == 1:
        return int(found[0]["id"])
    if not found:
        fail(f"no model {name!r} that you can see", sdk.EXIT_NOT_FOUND)
    fail(f"{len(found)} models are called {name!r}: give its id", sdk.EXIT_USAGE)


def version_id(g: Gantry, ref: str) -> int:
    """MODEL@ALIAS, MODEL@NUMBER (MODEL: id or name), or a version id."""
    if "@" not in ref:
        if not ref.isdigit():
            fail(f"{ref!r}: give MODEL@ALIAS, MODEL@NUMBER or a version id", sdk.EXIT_USAGE)
        return int(ref)
    name, _, which = ref.partition("@")
    model = g.models.get(model_id(g, name))
    aliases = {a["name"]: a["version"] for a in model.get("aliases", [])}
    number = aliases.get(which, int(which) if which.isdigit() else None)
    found = [v for v in g.models.versions(model["id"]) if v["number"] == number]
    if not found:
        fail(f"{ref}: no such version or alias", sdk.EXIT_NOT_FOUND)
    return int(found[0]["id"])


@app.command("list")
def list_(as_json: JsonFlag = False) -> None:
    """Registered models you can see."""
    g = connect()
    with errors_as_exit_codes():
        rows = g.models.list()
    if as_json:
        print_json(rows)
        return
    for row in rows:
        row["alias_list"] = ", ".join(f"{a['name']}→v{a['version']}" for a in row["aliases"])
    columns = [("ID", "id"), ("NAME", "name"), ("PROJECT", "project"), ("ALIASES", "alias_list"),
               ("UPDATED", "updated_at")]  # fmt: skip
    table(rows, columns, "No models yet: `gantry models register --job ID --name NAME`.")


@app.command()
def register(
    job: Annotated[int, typer.Option("--job", help="The job whose outputs to register")],
    name: Annotated[str | None, typer.Option(help="The model (made if new)")] = None,
    model: Annotated[int | None, typer.Option(help="An existing model's id")] = None,
    path: Annotated[list[str] | None, typer.Option(help="Only these output paths")] = None,
    description: Annotated[str, typer.Option()] = "",
    as_json: JsonFlag = False,
) -> None:
    """Register a finished job's outputs as a new model version."""
    if not (name or model):
        fail("give --name (new or existing model) or --model ID", sdk.EXIT_USAGE)
    g = connect()
    with errors_as_exit_codes():
        version = g.models.register(job, model=model, name=name, paths=path,
                                    description=description)  # fmt: skip
    if as_json:
        print_json(version)
    else:
        out.print(f"model {version['model']} version {version['number']} "
                  f"({len(version.get('files', []))} files, {version.get('format') or 'files'})")  # fmt: skip


@app.command()
def alias(
    model: Annotated[str, typer.Argument(help="Model id or name")],
    name: Annotated[str, typer.Argument(help="The alias, e.g. production")],
    version: Annotated[int, typer.Argument(help="The version number it points to")],
) -> None:
    """Point an alias at a version (the move is recorded)."""
    g = connect()
    with errors_as_exit_codes():
        answer = g.models.alias(model_id(g, model), name, version)
    out.print(f"{answer['name']}@{name} → version {version}")


@app.command()
def versions(model: Annotated[str, typer.Argument()], as_json: JsonFlag = False) -> None:
    """A model's versions."""
    g = connect()
    with errors_as_exit_codes():
        rows = g.models.versions(model_id(g, model))
    if as_json:
        print_json(rows)
        return
    columns = [("ID", "id"), ("NUMBER", "number"), ("FORMAT", "format"), ("JOB", "source_job"),
               ("CREATED", "created_at")]  # fmt: skip
    table(rows, columns, "No versions yet.")


@app.command()
def predict(
    version: Annotated[str, typer.Argument(help="MODEL@ALIAS, MODEL@NUMBER or a version id")],
    command: Annotated[str, typer.Option(help="The prediction command (the model is in model/)")],
    gpus: Annotated[int | None, typer.Option(min=0)] = None,
    image: Annotated[int | None, typer.Option(help="An image id")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-F")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Start a prediction job with the version's files staged under model/."""
    from gantry_cli.main import stream

    g = connect()
    with errors_as_exit_codes():
        job = g.models.predict(version_id(g, version), command, gpus=gpus, image=image)
        if as_json:
            print_json(job)
        else:
            out.print(f"job {job['id']} {job['state']}: {g.url}{job.get('url', '')}")
        if follow:
            raise typer.Exit(stream(g, job["id"], to_stderr=as_json))
