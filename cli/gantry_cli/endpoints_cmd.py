"""`gantry endpoints create/ls/logs/rm` and `gantry predict ENDPOINT file.json`.

An endpoint serves a registered model over HTTP through Gantry's gateway,
/serve/<tenant>/<project>/<endpoint>/ (KServe v2, and MLflow's /invocations).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gantry_cli import sdk
from gantry_cli.sdk import Gantry, GantryError, Resource
from gantry_cli.ui import JsonFlag, connect, errors_as_exit_codes, fail, out, print_json, table

app = typer.Typer(help="Model endpoints: serve a registered model over HTTP.", no_args_is_help=True)


class Endpoints(Resource):
    """/api/v1/endpoints/ and the gateway."""

    def list(self) -> list:
        return self.client.pages("endpoints/")

    def get(self, endpoint_id: int) -> dict:
        return self.client.json("GET", f"endpoints/{int(endpoint_id)}/")

    def create(self, **body: Any) -> dict:
        return self.client.json("POST", "endpoints/", json=body)

    def delete(self, endpoint_id: int) -> None:
        self.client.json("DELETE", f"endpoints/{int(endpoint_id)}/")

    def requests(self, endpoint_id: int) -> dict:
        return self.client.json("GET", f"endpoints/{int(endpoint_id)}/requests/")

    def call(self, endpoint: dict, path: str, body: bytes):
        """POST `body` to the endpoint's gateway path; the httpx response, whatever its status."""
        http = self.client.http
        url = self.client.url + endpoint["gateway_path"] + path
        return http.post(url, content=body, headers={"Content-Type": "application/json"})


def find(g: Gantry, ref: str) -> dict:
    """An endpoint by id, name, or tenant/project/name."""
    rows = Endpoints(g.client).list()
    if ref.isdigit():
        found = [r for r in rows if r["id"] == int(ref)]
    else:
        found = [r for r in rows if ref in (r["name"], r["gateway_path"].strip("/").removeprefix("serve/"))]
    if not found:
        fail(f"no endpoint {ref!r} that you can see", sdk.EXIT_NOT_FOUND)
    if len(found) > 1:
        fail(f"{len(found)} endpoints are called {ref!r}: give tenant/project/name or its id", sdk.EXIT_USAGE)
    return found[0]


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="Its name (part of its URL)")],
    model: Annotated[str, typer.Option(help="The registered model (id or name)")],
    project: Annotated[str, typer.Option(help="The project (id, slug or tenant/project)")],
    alias: Annotated[str, typer.Option(help="Follow this alias (moving it rolls the endpoint)")] = "",
    version: Annotated[int | None, typer.Option(help="Serve this version number instead")] = None,
    canary_alias: Annotated[str, typer.Option(help="A second alias taking a share")] = "",
    canary_percent: Annotated[int, typer.Option(min=0, max=100)] = 0,
    replicas: Annotated[int, typer.Option(min=1)] = 1,
    cpus: Annotated[int, typer.Option(min=1)] = 1,
    memory_mb: Annotated[int, typer.Option(min=128)] = 1024,
    idle_seconds: Annotated[int, typer.Option(min=0, help="Scale to zero after (0: never)")] = 900,
    rate_limit: Annotated[int, typer.Option(min=0, help="Requests a second (0: none)")] = 100,
    as_json: JsonFlag = False,
) -> None:
    """Create an endpoint; it starts on its first request."""
    from gantry_cli.models_cmd import model_id

    if bool(alias) == (version is not None):
        fail("give --alias or --version (one of them)", sdk.EXIT_USAGE)
    g = connect()
    with errors_as_exit_codes():
        body = {
            "name": name, "project": g.project_id(project), "model": model_id(g, model),
            "alias": alias, "version": version, "canary_alias": canary_alias,
            "canary_percent": canary_percent, "replicas": replicas, "cpus": cpus,
            "memory_mb": memory_mb, "idle_seconds": idle_seconds, "rate_limit": rate_limit,
        }  # fmt: skip
        made = Endpoints(g.client).create(**body)
    if as_json:
        print_json(made)
    else:
        out.print(f"endpoint {made['id']}: {g.url}{made['gateway_path']}")


@app.command("ls")
def ls(as_json: JsonFlag = False) -> None:
    """Endpoints you can see."""
    g = connect()
    with errors_as_exit_codes():
        rows = Endpoints(g.client).list()
    if as_json:
        print_json(rows)
        return
    for row in rows:
        row["serves"] = f"@{row['alias']}" if row["alias"] else f"v{row['version']}"
        row["answering"] = f"v{row['serving_version']}" if row["serving_version"] else "-"
    columns = [("ID", "id"), ("NAME", "name"), ("MODEL", "model_name"), ("SERVES", "serves"),
               ("ANSWERING", "answering"), ("STATE", "state"), ("PATH", "gateway_path")]  # fmt: skip
    table(rows, columns, "No endpoints yet: `gantry endpoints create NAME --model M --project P --alias A`.")


@app.command()
def logs(endpoint: Annotated[str, typer.Argument(help="Id, name or tenant/project/name")],
         as_json: JsonFlag = False) -> None:  # fmt: skip
    """The last requests (status and timing) and the totals per version."""
    g = connect()
    with errors_as_exit_codes():
        found = find(g, endpoint)
        answer = Endpoints(g.client).requests(found["id"])
    if as_json:
        print_json(answer)
        return
    for row in answer["requests"]:
        row["version"] = f"v{row['version_number']}" if row["version_number"] else "-"
        row["ms"] = f"{row['latency_ms']:.1f}"
    columns = [("AT", "at"), ("METHOD", "method"), ("PATH", "path"), ("STATUS", "status"),
               ("VERSION", "version"), ("MS", "ms")]  # fmt: skip
    table(answer["requests"], columns, "No request yet.")
    for v in answer["versions"]:
        p50 = f"{v['p50_ms']:.1f}" if v["p50_ms"] is not None else "-"
        p99 = f"{v['p99_ms']:.1f}" if v["p99_ms"] is not None else "-"
        out.print(f"v{v['version']}: {v['requests']} requests, {v['errors']} errors, p50 {p50} ms, p99 {p99} ms")


@app.command("rm")
def rm(endpoint: Annotated[str, typer.Argument(help="Id, name or tenant/project/name")],
       yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")] = False) -> None:  # fmt: skip
    """Delete an endpoint and stop its replicas."""
    g = connect()
    with errors_as_exit_codes():
        found = find(g, endpoint)
        if not yes and not typer.confirm(f"Delete endpoint {found['gateway_path']}?"):
            raise typer.Exit(1)
        Endpoints(g.client).delete(found["id"])
    out.print(f"deleted {found['gateway_path']}")


def predict(
    endpoint: Annotated[str, typer.Argument(help="Id, name or tenant/project/name")],
    file: Annotated[Path, typer.Argument(help="The request: KServe v2 JSON ('-': stdin)")],
    invocations: Annotated[
        bool, typer.Option(help="The file is MLflow's format (inputs/instances/dataframe_*)")
    ] = False,
) -> None:
    """Call an endpoint through Gantry's gateway and print its answer (JSON)."""
    try:
        body = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
        json.loads(body)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", sdk.EXIT_USAGE)
    except ValueError as exc:
        fail(f"{file} is not JSON: {exc}", sdk.EXIT_USAGE)
    g = connect()
    with errors_as_exit_codes():
        found = find(g, endpoint)
        path = "invocations" if invocations else f"v2/models/{found['name']}/infer"
        try:
            response = Endpoints(g.client).call(found, path, body)
        except Exception as exc:  # httpx's transport errors: the server unreachable
            raise sdk.Unreachable(f"cannot reach {g.url}: {exc}") from None
        if response.status_code >= 400:
            message, payload = sdk.error_message(response)
            if isinstance(payload, dict) and "error" in payload:
                message = str(payload["error"])
            raise GantryError(message, response.status_code, payload)
    version = response.headers.get("Gantry-Model-Version", "?")
    print(f"answered by {version}", file=sys.stderr)
    print_json(response.json())
