"""Uploading a worker's outputs once its command has ended: every regular file under the
outputs folder that really lies inside the workdir, with its size and sha256."""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections.abc import Callable

from .client import Client, FatalError, GiveUp, HttpError


def collect_outputs(workdir: str, outputs_dir: str, log: Callable[[str], None]) -> list:
    """(relative path, real path) of every file to upload, in a stable order; a link
    leading out of the workdir (or to something not a file) is skipped with a note."""
    files: list[tuple[str, str]] = []
    root = os.path.realpath(workdir)
    for dirpath, dirnames, filenames in os.walk(outputs_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            real = os.path.realpath(path)
            if os.path.commonpath([root, real]) != root or not os.path.isfile(real):
                log(f"skipping output {path}: not a regular file inside the workdir")
                continue
            rel = os.path.relpath(path, outputs_dir).replace(os.sep, "/")
            files.append((rel, real))
    return files


def upload_outputs(
    client: Client, worker: int, workdir: str, outputs_dir: str, log: Callable[[str], None]
) -> str:
    """Upload every file under outputs_dir; returns a failure note or ''."""
    files = collect_outputs(workdir, outputs_dir, log)
    if not files:
        return ""
    log(f"uploading {len(files)} output file(s)")
    failures: list[str] = []
    total = 0
    for rel, real in files:
        try:
            size, digest = size_and_sha256(real)
            client.put_file(
                "artifacts/" + urllib.parse.quote(rel, safe="/"),
                real,
                size,
                {"X-Gantry-Worker": str(worker), "X-Gantry-Sha256": digest},
            )
            total += size
        except FatalError:
            return "output upload stopped: job gone or token revoked"
        except (HttpError, GiveUp, OSError) as exc:
            failures.append(rel)
            log(f"could not upload output {rel}: {exc}")
    if failures:
        return f"{len(failures)} of {len(files)} output file(s) could not be uploaded"
    log(f"uploaded {len(files)} output file(s) ({total} bytes)")
    return ""


def size_and_sha256(path: str) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            n += len(chunk)
            h.update(chunk)
    return n, h.hexdigest()
