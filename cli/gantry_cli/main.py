"""The `gantry` command (Typer). Each command is a thin layer over gantry_cli.sdk.

Other modules register their commands here with one line each, e.g.
`app.command("shell")(shell.shell)`.

Exit codes (cli/README.md): 0 ok; 1 the job failed (`run --follow` and `logs -f` exit with
the job's own exit code when it has one); 2 usage (bad options, a bad gantry.yml, a tree
over the snapshot limits); 3 not signed in or the token refused; 4 not found; 5 not allowed;
6 refused by the server (invalid input); 7 the server unreachable or failing; 130 Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gantry_cli import datasets_cmd, endpoints_cmd, models_cmd, sdk, shell, snapshot, spec
from gantry_cli.sdk import Gantry, GantryError
from gantry_cli.sweep import app as sweep_app
from gantry_cli.ui import (
    JsonFlag,
    connect,
    err,
    errors_as_exit_codes,
    fail,
    out,
    print_json,
    table,
    when,
)

app = typer.Typer(
    name="gantry",
    help="Gantry from your terminal: send code, run jobs, follow their logs, move data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(datasets_cmd.app, name="datasets")
app.add_typer(models_cmd.app, name="models")
app.add_typer(endpoints_cmd.app, name="endpoints")
app.command("predict")(endpoints_cmd.predict)
app.add_typer(sweep_app, name="sweep")
app.command("shell")(shell.shell)
app.command("exec", context_settings={"allow_interspersed_args": False})(shell.exec_)


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
    with errors_as_exit_codes():
        me = g.me()
    if as_json:
        print_json({**me, "url": g.url})
    else:
        out.print(f"{me['username']} on {g.url}")


# --- run ---------------------------------------------------------------------------------


def _key_values(items: list[str] | None, what: str) -> dict:
    found = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{what} {item!r}: write NAME=VALUE", sdk.EXIT_USAGE)
        found[key] = value
    return found


def _job_spec(directory: Path, file: Path | None, overrides: dict) -> dict:
    """gantry.yml (given, or found in the directory) with the command line's options over it."""
    path = file or (directory / "gantry.yml")
    loaded = spec.load(path) if file or path.exists() else {}
    merged = {**loaded, **{k: v for k, v in overrides.items() if v not in (None, {}, [], "")}}
    if overrides.get("parameters") and loaded.get("parameters"):
        merged["parameters"] = {**loaded["parameters"], **overrides["parameters"]}
    if not merged.get("project"):
        fail("which project? Give --project (or `project:` in gantry.yml)", sdk.EXIT_USAGE)
    if not merged.get("command"):
        fail("no command: `gantry run -- python train.py` (or `command:` in gantry.yml)",
             sdk.EXIT_USAGE)  # fmt: skip
    return merged


def _image_id(g: Gantry, image: str) -> int:
    if image.isdigit():
        return int(image)
    images = g.client.pages("images/")
    for key in ("name", "reference"):
        found = [i for i in images if i.get(key) == image]
        if len(found) == 1:
            return int(found[0]["id"])
    names = ", ".join(sorted({i["name"] for i in images})[:10])
    fail(f"no image {image!r} (images you can use: {names})", sdk.EXIT_NOT_FOUND)


def job_exit_code(end: dict) -> int:
    if end["state"] == "succeeded":
        return 0
    code = end.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else sdk.EXIT_JOB_FAILED


def stream(g: Gantry, job_id: int, to_stderr: bool = False, worker: int | None = None) -> int:
    """Prints the job's log until it ends; returns the exit code the command should end with."""
    target = sys.stderr if to_stderr else sys.stdout
    many = False

    def status(message: dict) -> None:  # state changes on stderr, the log alone on stdout
        if message.get("events") and not message.get("terminal"):  # the end is said once, below
            state, reason = message["state"], message.get("reason") or ""
            err.print(f"job {job_id}: {state}" + (f" ({reason})" if reason not in ("", state) else ""))

    for item in g.logs.follow(job_id, on_status=status):
        if item.get("type") == "end":
            state, reason = item["state"], item.get("reason") or ""
            err.print(f"job {job_id} {state}" + (f": {reason}" if reason else ""))
            return job_exit_code(item)
        if worker is not None and item["worker"] != worker:
            continue
        many = many or item["worker"] != 0
        prefix = f"[{item['worker']}] " if many else ""
        target.write(prefix + item["text"] + "\n")
        target.flush()
    return sdk.EXIT_UNREACHABLE


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --")] = None,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="A gantry.yml")] = None,
    project: Annotated[str | None, typer.Option("--project", "-p", help="id or slug")] = None,
    name: Annotated[str | None, typer.Option(help="The job's name")] = None,
    image: Annotated[str | None, typer.Option(help="An image id, name or reference")] = None,
    gpus: Annotated[int | None, typer.Option(min=0)] = None,
    cpus: Annotated[int | None, typer.Option(min=1)] = None,
    memory_mb: Annotated[int | None, typer.Option(min=16)] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="distributed: N workers")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", "-P", help="NAME=VALUE")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE")] = None,
    input_: Annotated[
        list[int] | None, typer.Option("--input", "-i", help="A dataset version id to mount")
    ] = None,
    directory: Annotated[Path, typer.Option("--dir", help="The code to send")] = Path("."),
    follow: Annotated[
        bool, typer.Option("--follow", "-F", help="Stream the log; exit with the job's code")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Send this directory's code (git's ignore rules) and run a command on it."""
    if not directory.is_dir():
        fail(f"{directory}: not a directory", sdk.EXIT_USAGE)
    overrides = {
        "project": project, "name": name, "image": image, "gpus": gpus, "cpus": cpus,
        "memory_mb": memory_mb, "workers": workers, "command": _command(command),
        "parameters": _key_values(param, "--param"), "env": _key_values(env, "--env"),
        "inputs": [{"dataset_version": v} for v in input_ or []],
    }  # fmt: skip
    if workers and workers > 1:
        overrides["kind"] = "distributed"
    g = connect()
    with errors_as_exit_codes():
        job_spec = _job_spec(directory, file, overrides)
        project_id = g.project_id(job_spec.pop("project"))
        if job_spec.get("image"):
            job_spec["image"] = _image_id(g, job_spec["image"])
        ignore = job_spec.pop("ignore", [])
        uploaded = snapshot.send_folder(g, project_id, directory, ignore, quiet=as_json)
        job = g.jobs.submit(project_id, code_snapshot=uploaded.snapshot["id"], **job_spec)
        if as_json:
            print_json({"snapshot": uploaded.summary(), "job": job})
        else:
            err.print(uploaded.line())
            out.print(f"job {job['id']} {job['state']}: {g.url}{job.get('url', '')}")
        if follow:
            raise typer.Exit(stream(g, job["id"], to_stderr=as_json))


def _command(words: list[str] | None) -> str | None:
    import shlex

    return shlex.join(words) if words else None


# --- jobs ----------------------------------------------------------------------------------


@app.command()
def ps(
    project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    state: Annotated[str | None, typer.Option(help="e.g. running, queued")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only jobs you submitted")] = False,
    limit: Annotated[int, typer.Option(min=1)] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The latest jobs you can see."""
    g = connect()
    with errors_as_exit_codes():
        project_id = g.project_id(project) if project else None
        user = g.me()["username"] if mine else None
        jobs = g.jobs.list(project=project_id, state=state, user=user, limit=limit)
        names = project_names(g.projects()) if jobs and not as_json else {}
    if as_json:
        print_json(jobs)
        return
    for job in jobs:
        job["project_name"] = names.get(job["project"], job["project"])
    columns = [("ID", "id"), ("NAME", "name"), ("STATE", "state"), ("GPUS", "gpus"),
               ("PROJECT", "project_name"), ("BY", "created_by"), ("CREATED", "created_at"),
               ("QUEUE", "queue_position")]  # fmt: skip
    filters = [f"--{name} {value}" for name, value in (("project", project), ("state", state))
               if value] + (["--mine"] if mine else [])  # fmt: skip
    empty = (f"No jobs match {' '.join(filters)}." if filters
             else "No jobs yet: `gantry run -- python train.py` starts one.")  # fmt: skip
    table(jobs, columns, empty)


def project_names(projects: list[dict]) -> dict[int, str]:
    """Project id -> its name, as `tenant/name` where another visible project shares it."""
    seen: dict[str, int] = {}
    for p in projects:
        seen[p["name"]] = seen.get(p["name"], 0) + 1
    return {
        p["id"]: p["name"] if seen[p["name"]] == 1 else f"{p.get('tenant_slug')}/{p['name']}"
        for p in projects
    }


@app.command()
def logs(
    job: Annotated[int, typer.Argument(help="Job id")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until the job ends")
    ] = False,
    worker: Annotated[int | None, typer.Option(help="Only this worker rank")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A job's log (every worker's, or one's); with -f, live until the job ends."""
    g = connect()
    with errors_as_exit_codes():
        if follow:
            raise typer.Exit(stream(g, job, worker=worker))
        detail = g.jobs.get(job)
        ranks = [worker] if worker is not None else [w["rank"] for w in detail["workers"]] or [0]
        lines = []
        for rank in ranks:
            after = 0
            while True:
                page = g.logs.page(job, worker=rank, after=after, limit=5000)
                lines += page["results"]
                if page["complete"] or not page["results"]:
                    break
                after = page["next_after"]
    if as_json:
        print_json(lines)
        return
    many = len(ranks) > 1
    for line in lines:
        sys.stdout.write((f"[{line['worker']}] " if many else "") + line["text"] + "\n")


@app.command()
def cancel(jobs: Annotated[list[int], typer.Argument(help="Job ids")]) -> None:
    """Cancel jobs (their processes get SIGTERM, then SIGKILL after the grace period)."""
    g = connect()
    with errors_as_exit_codes():
        for job in jobs:
            answer = g.jobs.cancel(job)
            out.print(f"job {job}: {answer['state']}")


@app.command()
def why(job: Annotated[int, typer.Argument(help="Job id")], as_json: JsonFlag = False) -> None:
    """Why a job is where it is: its state, reason, queue position and estimated start."""
    g = connect()
    with errors_as_exit_codes():
        detail = g.jobs.get(job)
    keys = ["id", "name", "state", "state_reason", "queue_position", "estimated_start_at",
            "gpus", "priority", "preemptions", "attempt"]  # fmt: skip
    summary = {k: detail.get(k) for k in keys}
    summary["events"] = detail.get("events", [])[-5:]
    if as_json:
        print_json(summary)
        return
    out.print(f"job {job} ({detail['name'] or 'unnamed'}) is [bold]{detail['state']}[/bold]")
    if detail.get("state_reason"):
        out.print(f"  reason: {detail['state_reason']}")
    if detail["state"] == "queued":
        position = detail.get("queue_position")
        out.print(f"  queue position: {position if position is not None else 'not ranked yet'}")
        start = detail.get("estimated_start_at")
        out.print(f"  estimated start: {when(start) if start else 'unknown'}")
    for event in summary["events"]:
        out.print(f"  {when(event['at'])}: {event['from_state'] or '-'} → {event['to_state']}"
                  + (f" ({event['reason']})" if event.get("reason") else ""))  # fmt: skip


@app.command()
def cp(
    source: Annotated[str, typer.Argument(help="JOB:outputs/PATH (a file or a folder)")],
    dest: Annotated[Path, typer.Argument(help="Where to put it")] = Path("."),
    worker: Annotated[int, typer.Option(help="The worker whose outputs to copy")] = 0,
) -> None:
    """Copy a job's output files to this machine."""
    job_text, sep, path = source.partition(":")
    if not sep or not job_text.isdigit():
        fail(f"{source!r}: write JOB:outputs/PATH, e.g. 42:outputs/model.pt", sdk.EXIT_USAGE)
    path = path.strip("/")
    path = path[len("outputs") :].lstrip("/") if path.split("/")[0] == "outputs" else path
    g = connect()
    with errors_as_exit_codes():
        artifacts = [a for a in g.jobs.artifacts(int(job_text)) if a["worker"] == worker]
        exact = [a for a in artifacts if a["path"] == path]
        inside = [a for a in artifacts if not path or a["path"].startswith(path + "/")]
        if not exact and not inside:
            fail(f"job {job_text} has no output {path or '(none at all)'!r}", sdk.EXIT_NOT_FOUND)
        copied = 0
        for artifact in exact or inside:
            if exact:
                target = dest / Path(path).name if dest.is_dir() else dest
            else:
                below = artifact["path"][len(path) :].lstrip("/") if path else artifact["path"]
                target = dest / (Path(path).name if path else "") / below
            g.jobs.download_artifact(artifact["id"], target)
            copied += 1
            out.print(f"{artifact['path']} → {target}")
    err.print(f"{copied} file{'s' if copied != 1 else ''} copied")


def main() -> None:  # pragma: no cover - `python -m gantry_cli`
    app(prog_name="gantry")
