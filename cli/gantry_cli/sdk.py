"""A typed Python SDK for Gantry's API (/api/v1/), the one the `gantry` command uses.

    from gantry_cli.sdk import Gantry
    g = Gantry.from_config()            # $GANTRY_URL / $GANTRY_TOKEN, else `gantry login`'s file
    job = g.jobs.submit(project=3, command="python train.py", code_snapshot=12)
    for line in g.logs.follow(job["id"]):
        print(line["text"])

Every call raises `GantryError` (with `status`, `detail` and the CLI's `exit_code`) on an
answer other than 2xx, and `Unreachable` when the server cannot be reached.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

# Exit codes the CLI uses (documented in cli/README.md).
EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NOT_FOUND = 4
EXIT_FORBIDDEN = 5
EXIT_REJECTED = 6
EXIT_UNREACHABLE = 7


class GantryError(Exception):
    """The server answered with an error (or there is no usable configuration)."""

    exit_code = EXIT_REJECTED

    def __init__(self, message: str, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body
        if status == 401:
            self.exit_code = EXIT_AUTH
        elif status == 403:
            self.exit_code = EXIT_FORBIDDEN
        elif status == 404:
            self.exit_code = EXIT_NOT_FOUND
        elif status is not None and status >= 500:
            self.exit_code = EXIT_UNREACHABLE

    @property
    def detail(self) -> str:
        return str(self)


class NotConfigured(GantryError):
    exit_code = EXIT_AUTH


class Unreachable(GantryError):
    exit_code = EXIT_UNREACHABLE


def config_path() -> Path:
    """$XDG_CONFIG_HOME/gantry/config.json (default ~/.config/gantry/config.json)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gantry" / "config.json"


def read_config() -> dict:
    path = config_path()
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise NotConfigured(f"{path}: unreadable ({exc}); run `gantry login` again") from None


def write_config(url: str, token: str) -> Path:
    """Stores the URL and token readable by the user alone (0600, created so: never
    world-readable, not even for a moment)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url, "token": token}, fh)
    os.chmod(path.with_suffix(".tmp"), stat.S_IRUSR | stat.S_IWUSR)
    os.replace(path.with_suffix(".tmp"), path)
    return path


def error_message(response: httpx.Response) -> tuple[str, Any]:
    """DRF's error bodies as one readable line: {"detail": ...} or {"field": ["..."]}."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip().splitlines()
        return (text[0][:300] if text else f"HTTP {response.status_code}"), None
    if isinstance(body, dict):
        if "detail" in body and len(body) <= 2:
            return str(body["detail"]), body
        parts = []
        for field, problems in body.items():
            texts = [str(p) for p in (problems if isinstance(problems, list) else [problems])]
            # A message that names its field already ("parameters.lr: ...") or belongs to
            # none ("non_field_errors") reads best as it is.
            plain = field in ("non_field_errors", "__all__") or all(
                t.startswith((f"{field}:", f"{field}.")) for t in texts
            )
            parts.append("; ".join(texts) if plain else f"{field}: {'; '.join(texts)}")
        return ", ".join(parts), body
    if isinstance(body, list):
        return "; ".join(str(p) for p in body), body
    return str(body), body


class Client:
    """httpx under one base URL and token; errors become GantryError."""

    def __init__(self, url: str, token: str, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.token = token
        self.http = httpx.Client(
            base_url=self.url + "/api/v1/",
            headers={"Authorization": f"Bearer {token}", "User-Agent": "gantry-cli"},
            timeout=timeout,
        )

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach {self.url}: {exc}") from None
        if response.status_code >= 400:
            message, body = error_message(response)
            raise GantryError(message, response.status_code, body)
        return response

    def json(self, method: str, path: str, **kwargs) -> Any:
        response = self.request(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return {}
        return response.json()

    def pages(self, path: str, params: dict | None = None, limit: int | None = None) -> list:
        """Every row of a paginated list (DRF's `results` / `next`), up to `limit`."""
        rows: list = []
        params = dict(params or {})
        answer = self.json("GET", path, params=params)
        while True:
            if isinstance(answer, list):
                return rows + answer
            rows += answer.get("results", [])
            if not answer.get("next") or (limit and len(rows) >= limit):
                return rows[:limit] if limit else rows
            answer = self.json("GET", answer["next"])

    def close(self) -> None:
        self.http.close()


class Resource:
    def __init__(self, client: Client):
        self.client = client


class Jobs(Resource):
    def list(self, project: int | None = None, state: str | None = None, user: str | None = None,
             limit: int = 50) -> list:  # fmt: skip
        """The newest jobs first, filtered as the job list page filters them."""
        params: dict[str, Any] = {}
        if project:
            params["project"] = project
        if state:
            params["status"] = state
        if user:
            params["user"] = user
        return self.client.pages("jobs/", params, limit=limit)

    def get(self, job_id: int) -> dict:
        return self.client.json("GET", f"jobs/{int(job_id)}/")

    def submit(self, project: int, **spec: Any) -> dict:
        """POST /jobs/: the spec as the API takes it (command, gpus, image, code_snapshot...)."""
        body = {k: v for k, v in spec.items() if v is not None}
        return self.client.json("POST", "jobs/", json={"project": project, **body})

    def cancel(self, job_id: int) -> dict:
        return self.client.json("POST", f"jobs/{int(job_id)}/cancel/")

    def artifacts(self, job_id: int) -> list:
        return self.client.pages(f"jobs/{int(job_id)}/artifacts/")

    def download_artifact(self, artifact_id: int, dest: Path) -> int:
        """Streams one output file to `dest`; returns its size."""
        size = 0
        try:
            with self.client.http.stream("GET", f"artifacts/{int(artifact_id)}/download/") as r:
                if r.status_code >= 400:
                    r.read()
                    message, body = error_message(r)
                    raise GantryError(message, r.status_code, body)
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "wb") as fh:
                    for chunk in r.iter_bytes():
                        fh.write(chunk)
                        size += len(chunk)
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach {self.client.url}: {exc}") from None
        return size


class Logs(Resource):
    def page(self, job_id: int, worker: int = 0, after: int = 0, limit: int = 1000) -> dict:
        return self.client.json(
            "GET",
            f"jobs/{int(job_id)}/logs/",
            params={"worker": worker, "after": after, "limit": limit},
        )

    def follow(self, job_id: int, after: dict[int, int] | None = None, **kwargs) -> Iterator[dict]:
        """Every log line (then the job's end) over the live websocket, resuming after a
        dropped connection from the last sequence number seen per worker: nothing is
        lost or repeated. Yields {"type": "line", ...} and a last {"type": "end", ...}."""
        from gantry_cli.follow import follow_job

        yield from follow_job(self.client, job_id, after=after, **kwargs)


class Snapshots(Resource):
    def create(self, project: int, files: list[dict], git: dict | None = None) -> dict:
        return self.client.json(
            "POST", "snapshots/", json={"project": project, "files": files, "git": git}
        )

    def put_blob(self, snapshot_id: int, sha256: str, data: bytes | BinaryIO) -> None:
        """One content's bytes (or an open file, streamed with its length)."""
        self.client.request(
            "PUT",
            f"snapshots/{int(snapshot_id)}/blobs/{sha256}",
            content=data,
            headers={"Content-Type": "application/octet-stream"},
            timeout=600,
        )

    def put_blobs(self, snapshot_id: int, tar: Iterable[bytes], length: int) -> dict:
        """Many contents in one request: a tar (members named by sha256) streamed as it is
        built, with its length known up front (a WSGI server reads no chunked body).
        Answers {"received": [...], "missing": [...]}."""
        return self.client.json(
            "POST",
            f"snapshots/{int(snapshot_id)}/blobs",
            content=tar,
            headers={"Content-Type": "application/x-tar", "Content-Length": str(length)},
            timeout=600,
        )

    def finalize(self, snapshot_id: int) -> dict:
        return self.client.json("POST", f"snapshots/{int(snapshot_id)}/finalize")

    def get(self, snapshot_id: int) -> dict:
        return self.client.json("GET", f"snapshots/{int(snapshot_id)}")


class Datasets(Resource):
    def list(self, project: int | None = None) -> list:
        return self.client.pages("datasets/", {"project": project} if project else None)

    def get(self, dataset_id: int) -> dict:
        return self.client.json("GET", f"datasets/{int(dataset_id)}/")

    def create(self, project: int, name: str, slug: str | None = None, **extra: Any) -> dict:
        body = {"project": project, "name": name, **extra}
        if slug:
            body["slug"] = slug
        return self.client.json("POST", "datasets/", json=body)

    def versions(self, dataset_id: int) -> list:
        return self.client.pages("dataset-versions/", {"dataset": dataset_id})

    def version(self, version_id: int) -> dict:
        return self.client.json("GET", f"dataset-versions/{int(version_id)}/")

    def files(self, version_id: int) -> list:
        return self.client.pages("dataset-files/", {"version": version_id})

    def start_upload(self, dataset_id: int, files: list[dict], message: str = "",
                     exact: bool = False, remove: list[str] | tuple = ()) -> dict:  # fmt: skip
        """Opens an upload on top of the latest version; `remove` drops its files or
        folders, `exact` every file not in `files`. 409 (code "unchanged"): nothing would change."""
        body = {"dataset": dataset_id, "files": files, "message": message}
        if exact:
            body["exact"] = True
        if remove:
            body["remove"] = list(remove)
        return self.client.json("POST", "uploads/", json=body)

    def upload(self, upload_id: int) -> dict:
        return self.client.json("GET", f"uploads/{int(upload_id)}/")

    def push(self, dataset_id: int, folder: Path, **kwargs: Any) -> dict:
        """Uploads a folder as a new version (resumable, parts in parallel); see transfer.py."""
        from gantry_cli.transfer import push_folder

        return push_folder(self, dataset_id, folder, **kwargs)


class Models(Resource):
    def list(self, project: int | None = None) -> list:
        return self.client.pages("models/", {"project": project} if project else None)

    def get(self, model_id: int) -> dict:
        return self.client.json("GET", f"models/{int(model_id)}/")

    def register(
        self,
        job: int,
        model: int | None = None,
        name: str | None = None,
        paths: list[str] | None = None,
        description: str = "",
    ) -> dict:
        """A new version from a job's outputs: of `model`, or of the model called `name`."""
        body: dict[str, Any] = {"job": job, "description": description}
        if model:
            body["model"] = model
        if name:
            body["model_name"] = name
        if paths:
            body["paths"] = paths
        return self.client.json("POST", "model-versions/", json=body)

    def alias(self, model_id: int, name: str, version: int) -> dict:
        return self.client.json(
            "POST", f"models/{int(model_id)}/alias/", json={"name": name, "version": version}
        )

    def versions(self, model_id: int) -> list:
        return self.client.pages("model-versions/", {"model": model_id})

    def predict(self, version_id: int, command: str, **spec: Any) -> dict:
        body = {k: v for k, v in spec.items() if v is not None}
        return self.client.json(
            "POST", f"model-versions/{int(version_id)}/predict/", json={"command": command, **body}
        )


@dataclass
class Gantry:
    """One Gantry server, as one user (their API token)."""

    url: str
    token: str

    def __post_init__(self) -> None:
        self.client = Client(self.url, self.token)
        self.jobs = Jobs(self.client)
        self.logs = Logs(self.client)
        self.snapshots = Snapshots(self.client)
        self.datasets = Datasets(self.client)
        self.models = Models(self.client)

    @classmethod
    def from_config(cls) -> Gantry:
        """$GANTRY_URL / $GANTRY_TOKEN, each overriding the file `gantry login` wrote."""
        stored = read_config()
        url = os.environ.get("GANTRY_URL") or stored.get("url")
        token = os.environ.get("GANTRY_TOKEN") or stored.get("token")
        if not url or not token:
            raise NotConfigured(
                "not signed in: run `gantry login` (or set GANTRY_URL and GANTRY_TOKEN)"
            )
        return cls(url, token)

    def me(self) -> dict:
        return self.client.json("GET", "me/")

    def projects(self) -> list:
        return self.client.pages("projects/")

    def project_id(self, name_or_id: str | int) -> int:
        """A project by id, slug or name (`tenant/project` when the name is not unique)."""
        text = str(name_or_id)
        if text.isdigit():
            return int(text)
        tenant, _, name = text.rpartition("/")
        found = [
            p
            for p in self.projects()
            if name in (p.get("slug"), p.get("name"))
            and (not tenant or tenant in (str(p.get("tenant_slug")), str(p.get("tenant"))))
        ]
        if not found:
            raise GantryError(f"no project {text!r} that you can see", 404)
        if len(found) > 1:
            raise GantryError(
                f"{len(found)} projects are called {text!r}: name one by id or tenant/project",
                400,
            )
        return int(found[0]["id"])

    def close(self) -> None:
        self.client.close()
