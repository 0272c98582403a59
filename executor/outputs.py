"""Uploading a worker's outputs once its command has ended: every regular file under the
outputs folder, with its size and sha256, read through descriptors that cannot leave the
workdir (executor/safefs.py): a symbolic link is skipped with a note, never followed, even
one that points elsewhere inside the workdir, and a file swapped for a link while the
outputs are read is refused."""

from __future__ import annotations

import hashlib
import os
import stat
import urllib.parse
from collections.abc import Callable
from typing import BinaryIO

from .client import Client, FatalError, GiveUp, HttpError
from .safefs import Dir


def collect_outputs(outputs: Dir, log: Callable[[str], None]) -> list[str]:
    """Relative paths of every regular file to upload, in a stable order; anything else
    (a link, a socket, a FIFO) is skipped with a note."""
    files = []
    for rel, mode in outputs.entries():
        if stat.S_ISREG(mode):
            files.append(rel)
        elif not stat.S_ISDIR(mode):
            log(f"skipping output {rel}: not a regular file (symbolic links are not followed)")
    return files


def upload_outputs(
    client: Client, worker: int, workdir: str, outputs_dir: str, log: Callable[[str], None]
) -> str:
    """Upload every file under outputs_dir; returns a failure note or ''."""
    rel_dir = os.path.relpath(outputs_dir, workdir)
    try:
        work = Dir.workdir(workdir)
        try:
            outputs = work.sub(rel_dir)
        finally:
            work.close()
    except FileNotFoundError:
        return ""
    except OSError as exc:  # UnsafePath: the outputs folder itself replaced by a link
        log(f"outputs not uploaded: {exc}")
        return f"outputs not uploaded: the outputs folder is not a folder ({exc.strerror})"
    with outputs:
        files = collect_outputs(outputs, log)
        if not files:
            return ""
        log(f"uploading {len(files)} output file(s)")
        failures: list[str] = []
        total = 0
        for rel in files:
            try:
                with outputs.open_file(rel) as fh:
                    size, digest = size_and_sha256(fh)
                client.put_file(
                    "artifacts/" + urllib.parse.quote(rel, safe="/"),
                    lambda rel=rel: outputs.open_file(rel),
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


def size_and_sha256(fh: BinaryIO) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        n += len(chunk)
        h.update(chunk)
    return n, h.hexdigest()
