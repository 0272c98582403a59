"""Download job inputs into the workdir, verifying size and sha256."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import posixpath
from collections.abc import Callable
from typing import Any

from .client import Client, GiveUp, HttpError, RetryableError

CHUNK = 1 << 20


class StagingError(Exception):
    """Input staging failed; the message is shown to the user."""


class StagingCancelled(Exception):
    pass


def _check_rel(value: object, what: str) -> list[str]:
    if not isinstance(value, str):
        raise StagingError(f"invalid {what} {value!r}: not a string")
    if "\x00" in value or "\\" in value:
        raise StagingError(f"refusing {what} {value!r}: invalid characters")
    if value.startswith("/") or posixpath.isabs(value) or (len(value) > 1 and value[1] == ":"):
        raise StagingError(f"refusing {what} {value!r}: absolute paths are not allowed")
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise StagingError(f"refusing {what} {value!r}: it escapes the workdir ('..')")
    return parts


def safe_destination(workdir: str, mount: object, path: object) -> str:
    """``workdir/<mount>/<path>``, refusing anything that escapes workdir."""
    mparts = _check_rel(mount, "mount")
    pparts = _check_rel(path, "input path")
    if not pparts:
        raise StagingError(f"invalid input path {path!r}: empty")
    parts = mparts + pparts
    if parts[0] == ".gantry":
        raise StagingError(f"refusing input path {mount!r}/{path!r}: .gantry is reserved")
    root = os.path.realpath(workdir)
    dest = os.path.join(root, *parts)
    # Pre-existing symlinks inside the workdir must not lead outside of it.
    real = os.path.realpath(dest)
    if os.path.commonpath([root, real]) != root:
        raise StagingError(f"refusing input path {mount!r}/{path!r}: it escapes the workdir")
    return dest


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def stage_inputs(
    client: Client,
    workdir: str,
    inputs: list[dict[str, Any]],
    log: Callable[[str], None],
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> None:
    if not inputs:
        return
    if not isinstance(inputs, list):
        raise StagingError("spec 'inputs' must be a list")
    # Validate every path first so nothing is downloaded for a bad spec.
    plan: list[tuple[str, str, dict[str, Any]]] = []
    for inp in inputs:
        if not isinstance(inp, dict):
            raise StagingError(f"invalid input entry {inp!r}")
        mount = inp.get("mount", "")
        files = inp.get("files") or []
        for f in files:
            if not isinstance(f, dict) or not f.get("url"):
                raise StagingError(f"invalid input file entry {f!r} in mount {mount!r}")
            plan.append((str(mount), safe_destination(workdir, mount, f.get("path")), f))
    total = sum(int(f.get("size") or 0) for _, _, f in plan)
    log(f"staging {len(plan)} input file(s) ({_human(total)}) into {workdir}")
    fetched = skipped = 0
    for mount, dest, f in plan:
        if cancelled():
            raise StagingCancelled()
        label = posixpath.join(mount, f["path"]) if mount else f["path"]
        expected_sha = (f.get("sha256") or "").lower() or None
        expected_size = f.get("size")
        expected_size = None if expected_size is None else int(expected_size)
        if (
            expected_sha is not None
            and os.path.isfile(dest)
            and (expected_size is None or os.path.getsize(dest) == expected_size)
            and _sha256_file(dest) == expected_sha
        ):
            skipped += 1
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        _download(client, f["url"], dest, label, expected_size, expected_sha, cancelled, deadline)
        fetched += 1
    msg = f"staged {len(plan)} input file(s): {fetched} downloaded"
    if skipped:
        msg += f", {skipped} already present"
    log(msg)


def _download(
    client: Client,
    url: str,
    dest: str,
    label: str,
    expected_size: int | None,
    expected_sha: str | None,
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> None:
    full = client.resolve(url)
    same_origin = client.same_origin(full)
    tmp = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.part")

    def attempt() -> tuple[int, str]:
        try:
            resp = client.open("GET", full, auth=same_origin, fatal=False)
        except HttpError as exc:
            raise StagingError(f"cannot download input {label}: HTTP {exc.status}") from exc
        h = hashlib.sha256()
        n = 0
        try:
            with resp, open(tmp, "wb") as out:
                while True:
                    if cancelled():
                        raise StagingCancelled()
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    n += len(chunk)
                    if expected_size is not None and n > expected_size:
                        raise StagingError(
                            f"input {label}: size mismatch (expected {expected_size} bytes, got more)"
                        )
                    h.update(chunk)
                    out.write(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise RetryableError(f"download of {label} interrupted: {exc}") from exc
        return n, h.hexdigest()

    try:
        size, digest = client.retrying(
            attempt, f"download {label}", interrupted=cancelled, deadline=deadline
        )
    except GiveUp as exc:
        _unlink(tmp)
        if cancelled():
            raise StagingCancelled() from exc
        raise StagingError(f"cannot download input {label}: {exc}") from exc
    except BaseException:
        _unlink(tmp)
        raise
    if expected_size is not None and size != expected_size:
        _unlink(tmp)
        raise StagingError(
            f"input {label}: size mismatch (expected {expected_size} bytes, got {size})"
        )
    if expected_sha is not None and digest != expected_sha:
        _unlink(tmp)
        raise StagingError(
            f"input {label}: sha256 mismatch (expected {expected_sha}, got {digest})"
        )
    os.replace(tmp, dest)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
