"""Moving dataset files: `gantry datasets push` and `pull`.

Push speaks the dataset upload-session API (datasets/api.py), which this module took over
from the old standalone `datasets/cli.py`: each file's sha256 goes first, so contents the
tenant already holds are linked, not sent; the rest goes in parts, several at once,
straight to the object store through presigned URLs when the server hands them out (S3),
else to Gantry. The session's id is remembered in the user's state directory under the
folder's path, so running the same push again after an interruption (Ctrl-C, a lost
connection, a killed process) asks which parts arrived and sends only the others.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import unicodedata
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from gantry_cli.sdk import GantryError, Unreachable

if TYPE_CHECKING:
    from gantry_cli.sdk import Datasets

CHUNK = 1024 * 1024
SIGN_BATCH = 500
Progress = Callable[[int, int], None]  # (total bytes, bytes just sent)


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gantry" / "uploads"


def collect(folder: Path) -> dict[str, Path]:
    """Every file under `folder` by its relative path (NFKC, as the server keeps names)."""
    folder = folder.resolve()
    if folder.is_file():
        return {unicodedata.normalize("NFKC", folder.name): folder}
    if not folder.is_dir():
        raise GantryError(f"{folder}: no such file or folder", 404)
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[unicodedata.normalize("NFKC", path.relative_to(folder).as_posix())] = path
    return found


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(files: dict[str, Path], options: dict | None = None) -> list:
    """What must not have changed for a remembered session to be resumed: the files and
    the push's options (--exact, --remove)."""
    listed = [[rel, p.stat().st_size, p.stat().st_mtime_ns] for rel, p in files.items()]
    return [*listed, options] if options else listed


class Remembered:
    """The open upload of one folder to one dataset on one server."""

    def __init__(self, url: str, dataset: int, folder: Path):
        key = hashlib.sha256(f"{url}|{dataset}|{folder.resolve()}".encode()).hexdigest()[:24]
        self.path = state_dir() / f"{key}.json"

    def load(self, files: dict[str, Path], options: dict | None = None) -> int | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data.get("upload") if data.get("files") == _fingerprint(files, options) else None

    def save(self, upload: int, files: dict[str, Path], options: dict | None = None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path.write_text(json.dumps({"upload": upload, "files": _fingerprint(files, options)}))

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


def _read_part(path: Path, number: int, size: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek((number - 1) * size)
        return fh.read(size)


def _send_parts(datasets: Datasets, session: dict, files: dict[str, Path], workers: int,
                progress: Progress | None) -> int:  # fmt: skip
    """Sends every part the session lacks, `workers` at a time; returns the parts sent."""
    client = datasets.client
    size = session["part_size"]
    todo = []
    for f in session["files"]:
        if f.get("complete"):
            continue
        have = set(f["parts"])
        todo += [(f, n) for n in range(1, f["part_count"] + 1) if n not in have]
    if progress:
        progress(sum(min(size, f["size"] - (n - 1) * size) for f, n in todo), 0)
    if not todo:
        return 0
    urls: dict[tuple[int, int], str] = {}
    if session["backend"] == "s3":
        by_file: dict[int, list[int]] = {}
        for f, n in todo:
            by_file.setdefault(f["id"], []).append(n)
        for file_id, numbers in by_file.items():
            for i in range(0, len(numbers), SIGN_BATCH):
                signed = client.json(
                    "POST",
                    f"uploads/{session['id']}/sign/",
                    json={"file": file_id, "numbers": numbers[i : i + SIGN_BATCH]},
                )["urls"]
                urls.update({(file_id, int(n)): u for n, u in signed.items()})
    direct = httpx.Client(timeout=600)

    def send(item) -> int:
        f, n = item
        chunk = _read_part(files[f["path"]], n, size)
        digest = hashlib.sha256(chunk).hexdigest()
        if session["backend"] == "s3":
            try:
                answer = direct.put(urls[(f["id"], n)], content=chunk)
            except httpx.TransportError as exc:
                raise Unreachable(f"object store: {exc}") from None
            if answer.status_code >= 400:
                raise GantryError(f"object store refused part {n} of {f['path']}: "
                                  f"HTTP {answer.status_code}", answer.status_code)  # fmt: skip
            client.json(
                "POST",
                f"uploads/{session['id']}/complete-part/",
                json={
                    "file": f["id"],
                    "number": n,
                    "sha256": digest,
                    "etag": answer.headers.get("ETag", ""),
                },  # fmt: skip
            )
        else:
            client.request(
                "PUT",
                f"uploads/{session['id']}/part/",
                params={"file": f["id"], "number": n},
                content=chunk,
                headers={"Content-Type": "application/octet-stream", "X-Part-Sha256": digest},
                timeout=600,
            )
        if progress:
            progress(0, len(chunk))
        return 1

    try:
        with ThreadPoolExecutor(workers) as pool:
            return sum(pool.map(send, todo))
    finally:
        direct.close()


def push_folder(datasets: Datasets, dataset: int, folder: Path, message: str = "",
                resume: int | None = None, workers: int = 4, progress: Progress | None = None,
                on_session: Callable[[dict, bool], None] | None = None, exact: bool = False,
                remove: list[str] | tuple = ()) -> dict:  # fmt: skip
    """A new version of `dataset` from `folder`, resumed where an earlier push stopped.

    The folder's files are added to the latest version (replacing those at the same
    paths); `remove` drops files or folders of it; with `exact` the new version holds the
    folder's files and nothing else. The folder's files under a removed path are not sent.
    Returns the committed session ({"id", "version",
    "files", ...} plus "parts_sent" and "resumed"), or {"unchanged": True, "version",
    "number", "detail"} when the latest version already holds exactly that: nothing is
    created."""
    # What is removed is not sent again from the folder either.
    files = {rel: p for rel, p in collect(folder).items()
             if not any(rel == r or rel.startswith(r.rstrip("/") + "/") for r in remove)}  # fmt: skip
    options = {"exact": exact, "remove": sorted(remove)} if exact or remove else None
    memory = Remembered(datasets.client.url, dataset, folder)
    resume = resume or memory.load(files, options)
    session = None
    if resume:
        try:
            session = datasets.upload(resume)
        except GantryError as exc:
            if exc.status != 404:
                raise
        if session and (session["dataset"] != dataset or session["state"] in ("aborted", "failed")):
            session = None
    resumed = session is not None
    if session is None:
        listed = [{"path": rel, "size": p.stat().st_size, "sha256": file_sha256(p)}
                  for rel, p in files.items()]  # fmt: skip
        try:
            session = datasets.start_upload(dataset, listed, message, exact=exact, remove=remove)
        except GantryError as exc:
            if exc.status == 409 and isinstance(exc.body, dict) and exc.body.get("code") == "unchanged":
                memory.forget()
                return {"unchanged": True, "version": exc.body["version"],
                        "number": exc.body["number"], "detail": str(exc)}  # fmt: skip
            raise
        memory.save(session["id"], files, options)
    if on_session:
        on_session(session, resumed)
    sent = 0
    if session["state"] == "open":
        missing = [f["path"] for f in session["files"] if f["path"] not in files]
        if missing:
            raise GantryError(f"upload {session['id']} expects files that are gone: "
                              f"{', '.join(missing[:5])}", 400)  # fmt: skip
        sent = _send_parts(datasets, session, files, workers, progress)
        datasets.client.json("POST", f"uploads/{session['id']}/commit/")
    while True:
        status = datasets.upload(session["id"])
        if status["state"] == "committed":
            memory.forget()
            return {**status, "parts_sent": sent, "resumed": resumed}
        if status["state"] != "committing":
            memory.forget()
            raise GantryError(f"commit failed: {status['error'] or status['state']}", 400)
        time.sleep(0.5)


def pull_version(datasets: Datasets, version: int, dest: Path, workers: int = 4,
                 progress: Progress | None = None) -> dict:  # fmt: skip
    """Downloads a version's files under `dest`; files already there with the same
    content are kept (a pull that stopped midway picks up where it was)."""
    client = datasets.client
    rows = datasets.files(version)
    dest = dest.resolve()
    todo = []
    for row in rows:
        target = (dest / row["path"]).resolve()
        if not target.is_relative_to(dest):
            raise GantryError(f"refusing a path outside {dest}: {row['path']!r}", 400)
        if (
            target.is_file()
            and target.stat().st_size == row["size"]
            and (file_sha256(target) == row["sha256"])
        ):
            continue
        todo.append((row, target))
    if progress:
        progress(sum(r["size"] for r, _ in todo), 0)

    def fetch(item) -> int:
        row, target = item
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".gantry-part")
        digest = hashlib.sha256()
        try:
            with client.http.stream(
                "GET", f"dataset-files/{row['id']}/download/", follow_redirects=True
            ) as answer:
                if answer.status_code >= 400:
                    answer.read()
                    raise GantryError(f"{row['path']}: HTTP {answer.status_code}",
                                      answer.status_code)  # fmt: skip
                with open(partial, "wb") as fh:
                    for chunk in answer.iter_bytes(CHUNK):
                        fh.write(chunk)
                        digest.update(chunk)
                        if progress:
                            progress(0, len(chunk))
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach {client.url}: {exc}") from None
        if digest.hexdigest() != row["sha256"]:
            partial.unlink(missing_ok=True)
            raise GantryError(f"{row['path']}: the content does not match its sha256", 400)
        os.replace(partial, target)
        return row["size"]

    with ThreadPoolExecutor(workers) as pool:
        size = sum(pool.map(fetch, todo))
    return {"version": version, "files": len(rows), "downloaded": len(todo), "bytes": size}
