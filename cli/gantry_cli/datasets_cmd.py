"""`gantry datasets ...`: list, versions, push a folder as a version, pull a version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gantry_cli import sdk
from gantry_cli.sdk import Gantry
from gantry_cli.transfer import pull_version
from gantry_cli.ui import (
    Bar,
    JsonFlag,
    connect,
    err,
    errors_as_exit_codes,
    fail,
    human_size,
    out,
    print_json,
    table,
)

app = typer.Typer(help="Datasets: list them, push a folder as a new version, pull one.",
                  no_args_is_help=True)  # fmt: skip


def dataset_id(g: Gantry, name: str, project: str | None) -> int:
    """A dataset by id, or by slug or name (within --project when given)."""
    if name.isdigit():
        return int(name)
    project_id = g.project_id(project) if project else None
    found = [d for d in g.datasets.list(project_id) if name in (d["slug"], d["name"])]
    if len(found) == 1:
        return int(found[0]["id"])
    if not found:
        fail(f"no dataset {name!r} that you can see", sdk.EXIT_NOT_FOUND)
    fail(f"{len(found)} datasets are called {name!r}: give --project or the id", sdk.EXIT_USAGE)


@app.command("list")
def list_(
    project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Datasets you can see."""
    g = connect()
    with errors_as_exit_codes():
        rows = g.datasets.list(g.project_id(project) if project else None)
    if as_json:
        print_json(rows)
        return
    columns = [("ID", "id"), ("SLUG", "slug"), ("NAME", "name"), ("PROJECT", "project"),
               ("CREATED", "created_at")]  # fmt: skip
    table(rows, columns, "No datasets yet: `gantry datasets push DIR --dataset NAME` makes one.")


@app.command()
def versions(
    dataset: Annotated[str, typer.Argument(help="id or slug")],
    project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A dataset's versions."""
    g = connect()
    with errors_as_exit_codes():
        rows = g.datasets.versions(dataset_id(g, dataset, project))
    if as_json:
        print_json(rows)
        return
    for row in rows:
        row["size"] = human_size(row["total_size"])
    columns = [("ID", "id"), ("NUMBER", "number"), ("FILES", "file_count"),
               ("SIZE", "size"), ("MESSAGE", "message"), ("CREATED", "created_at")]  # fmt: skip
    table(rows, columns, "No versions yet.")


@app.command()
def push(
    folder: Annotated[
        Path, typer.Argument(help="A folder (its contents become the version's top level) or a file")
    ],
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="id or slug")],
    project: Annotated[str | None, typer.Option("--project", "-p", help="to create it in")] = None,
    create: Annotated[bool, typer.Option(help="Create the dataset when it does not exist")] = False,
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    exact: Annotated[
        bool, typer.Option("--exact", help="The new version is exactly the folder: files not in it are dropped")
    ] = False,
    remove: Annotated[
        list[str] | None,
        typer.Option(
            "--remove", help="Drop this file or folder of the latest version, and do not send the "
            "folder's own (repeatable)"
        ),
    ] = None,
    resume: Annotated[int | None, typer.Option(help="An upload id to continue")] = None,
    parallel: Annotated[int, typer.Option(min=1, max=32, help="Parts sent at once")] = 4,
    as_json: JsonFlag = False,
) -> None:
    """Upload a folder as a new version on top of the latest (its files added or replaced;
    --remove / --exact drop others). Run it again after an interruption: it resumes. A
    folder that changes nothing makes no version."""
    g = connect()
    with errors_as_exit_codes():
        target = _dataset_for_push(g, dataset, project, create)

        def announce(session: dict, resumed: bool) -> None:
            verb = "resuming" if resumed else "started"
            err.print(f"{verb} upload {session['id']} ({len(session['files'])} files, "
                      f"{session['backend']})")  # fmt: skip

        with Bar("uploading", enabled=not as_json) as bar:
            status = g.datasets.push(
                target, folder, message=message, resume=resume, workers=parallel,
                progress=bar, on_session=announce, exact=exact, remove=remove or [],
            )  # fmt: skip
    if as_json:
        print_json(status)
    elif status.get("unchanged"):
        out.print(f"{status['detail']} No new version made.")
    else:
        out.print(f"committed upload {status['id']} as version {status['version']} "
                  f"({status['parts_sent']} parts sent)")  # fmt: skip


def _dataset_for_push(g: Gantry, dataset: str, project: str | None, create: bool) -> int:
    if not create:
        return dataset_id(g, dataset, project)
    if not project:
        fail("--create needs --project", sdk.EXIT_USAGE)
    project_id = g.project_id(project)
    found = [d for d in g.datasets.list(project_id) if dataset in (d["slug"], d["name"])]
    if found:
        return int(found[0]["id"])
    return int(g.datasets.create(project_id, name=dataset)["id"])


@app.command()
def pull(
    dataset: Annotated[
        str, typer.Argument(help="DATASET[@NUMBER]: id or slug; default the latest")
    ],
    dest: Annotated[Path, typer.Argument(help="The folder to fill")] = Path("."),
    project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    parallel: Annotated[int, typer.Option(min=1, max=32)] = 4,
    as_json: JsonFlag = False,
) -> None:
    """Download a version's files (files already there and unchanged are kept)."""
    name, _, number = dataset.partition("@")
    g = connect()
    with errors_as_exit_codes():
        rows = g.datasets.versions(dataset_id(g, name, project))
        if number:
            rows = [v for v in rows if str(v["number"]) == number]
        if not rows:
            fail(f"{dataset}: no such version", sdk.EXIT_NOT_FOUND)
        version = max(rows, key=lambda v: v["number"])
        with Bar("downloading", enabled=not as_json) as bar:
            result = pull_version(g.datasets, version["id"], dest, parallel, progress=bar)
    result["number"] = version["number"]
    if as_json:
        print_json(result)
    else:
        out.print(f"version {version['number']}: {result['files']} files in {dest} "
                  f"({result['downloaded']} downloaded)")  # fmt: skip
