"""Stage the job's code snapshot into its working directory before the command starts.

The spec names the manifest's URL (``spec["code"]``, the agent API's ``jobs/<id>/code``);
each file is downloaded, its size and sha256 checked, and placed read-only (0444, or 0555
for executables) at its path; folders stay writable, so the job may write beside its code.
Every path is checked before anything is downloaded (absolute paths, ``..`` and
``.gantry`` are refused), and every file is written through descriptors that refuse a
symbolic link anywhere on its path (executor/safefs.py). The same code
runs on the local backend and in a Kubernetes pod (the executor is inside the job).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .client import Client, GiveUp, HttpError
from .safefs import Dir
from .staging import SHA256_HEX, StagingCancelled, StagingError, destination, stage_inputs

READ_ONLY_EXECUTABLE = 0o555


def _plan(workdir: str, files: Any) -> list[dict[str, Any]]:
    """The manifest's files, each checked (path, size, sha256, mode), or StagingError."""
    if not isinstance(files, list):
        raise StagingError("code manifest: 'files' must be a list")
    checked = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("url"), str) or not f["url"]:
            raise StagingError(f"code manifest: invalid file entry {f!r:.200}")
        sha = f.get("sha256")
        if not isinstance(sha, str) or len(sha) != 64 or not set(sha) <= SHA256_HEX:
            raise StagingError(f"code manifest: invalid sha256 for {f.get('path')!r}")
        size = f.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise StagingError(f"code manifest: invalid size for {f.get('path')!r}")
        mode = f.get("mode", 0o644)
        if isinstance(mode, bool) or not isinstance(mode, int):
            raise StagingError(f"code manifest: invalid mode for {f.get('path')!r}")
        parts = destination("", f.get("path"))
        checked.append({**f, "dest": "/".join(parts), "executable": bool(mode & 0o111)})
    return checked


def stage_code(
    client: Client,
    workdir: str,
    code_url: Any,
    log: Callable[[str], None],
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> None:
    """Download and place the code snapshot's files (nothing when the job names none)."""
    if not code_url:
        return
    if not isinstance(code_url, str):
        raise StagingError(f"spec 'code' must be a URL, not {code_url!r:.100}")
    try:
        manifest = client.json("GET", code_url, interrupted=cancelled, deadline=deadline)
    except GiveUp as exc:
        if cancelled():
            raise StagingCancelled() from exc
        raise StagingError(f"cannot fetch the code manifest: {exc}") from exc
    except HttpError as exc:
        raise StagingError(f"cannot fetch the code manifest: {exc}") from exc
    if not isinstance(manifest, dict):
        raise StagingError("code manifest: not a JSON object")
    plan = _plan(workdir, manifest.get("files"))
    log(f"staging code snapshot #{manifest.get('snapshot')}: {len(plan)} file(s), read-only")
    entries = [{k: v for k, v in f.items() if k not in ("dest", "executable")} for f in plan]
    stage_inputs(
        client,
        workdir,
        [{"mount": "", "files": entries, "read_only": True}],
        lambda msg: log(msg.replace("input file(s)", "code file(s)")),
        cancelled,
        deadline,
    )
    with Dir.workdir(workdir) as work:
        for f in plan:
            if f["executable"]:
                work.chmod(f["dest"], READ_ONLY_EXECUTABLE)
