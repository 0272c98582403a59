"""Download job inputs into the workdir, verifying size and sha256."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import math
import os
import posixpath
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from .client import Client, GiveUp, HttpError, RetryableError
from .safefs import Dir, UnsafePath

CHUNK = 1 << 20
SHA256_HEX = frozenset("0123456789abcdef")
READ_ONLY_MODE = 0o444

try:  # POSIX only; without it concurrent executors may download a blob twice (still safe)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


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


def destination(mount: object, path: object) -> list[str]:
    """The components of ``<mount>/<path>`` in the workdir, refusing absolute paths, ``..``
    and ``.gantry``. Links in the workdir are refused where the file is written
    (executor/safefs.py), not here: a check by name could be raced."""
    mparts = _check_rel(mount, "mount")
    pparts = _check_rel(path, "input path")
    if not pparts:
        raise StagingError(f"invalid input path {path!r}: empty")
    parts = mparts + pparts
    if parts[0] == ".gantry":
        raise StagingError(f"refusing input path {mount!r}/{path!r}: .gantry is reserved")
    return parts


def _sha256_file(fh: BinaryIO) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(CHUNK), b""):
        h.update(chunk)
    return h.hexdigest()


def _present(folder: Dir, name: str, size: int | None, sha: str) -> bool:
    """Whether `name` in `folder` already is this file (a reused workdir)."""
    try:
        with folder.open_file(name) as fh:
            if size is not None and os.fstat(fh.fileno()).st_size != size:
                return False
            return _sha256_file(fh) == sha
    except OSError:
        return False


SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _tenths(x: float) -> float:
    return math.floor(x * 10 + 0.5) / 10  # half up, as Gantry's pages round


def _human(n: float) -> str:
    """Bytes as Gantry's pages show them (core.formatting.format_size): binary units,
    one decimal, so a job's log and its version page name the same size."""
    size = float(n)
    if size < 1024:
        return f"{math.floor(size + 0.5)} B"
    unit = 0
    while size >= 1024 and unit < len(SIZE_UNITS) - 1:
        size /= 1024
        unit += 1
    if _tenths(size) >= 1024 and unit < len(SIZE_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{_tenths(size):.1f} {SIZE_UNITS[unit]}"


def stage_inputs(
    client: Client,
    workdir: str,
    inputs: list[dict[str, Any]],
    log: Callable[[str], None],
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> None:
    """Stage the spec's input files into the workdir: every entry is checked before a byte
    is downloaded (`input_plan`), then each file is found in place, in the blob cache or
    downloaded (`_stage_file`)."""
    if not inputs:
        return
    plan = input_plan(inputs)
    total = sum(int(f.get("size") or 0) for _, _, f, _ in plan)
    log(f"staging {len(plan)} input file(s) ({_human(total)}) into {workdir}")
    cache = BlobCache.from_env(log)
    counts = {"downloaded": 0, "cached": 0, "present": 0}
    with Dir.workdir(workdir) as work:
        for mount, parts, f, read_only in plan:
            if cancelled():
                raise StagingCancelled()
            label = posixpath.join(mount, f["path"]) if mount else f["path"]
            try:
                with work.sub("/".join(parts[:-1]), create=True) as folder:
                    how, cache = _stage_file(
                        client, folder, parts[-1], f, label, read_only, cache, log, cancelled, deadline
                    )
            except OSError as exc:  # UnsafePath: a link the job left on the way
                raise StagingError(f"cannot stage input {label}: {exc}") from exc
            counts[how] += 1
    fetched, cached, skipped = counts["downloaded"], counts["cached"], counts["present"]
    msg = f"staged {len(plan)} input file(s): {fetched} downloaded"
    if cached:
        msg += f", {cached} from the cache"
    if skipped:
        msg += f", {skipped} already present"
    log(msg)
    if cache is not None and fetched:
        with contextlib.suppress(OSError):
            cache.evict()


def input_plan(inputs: Any) -> list[tuple[str, list[str], dict[str, Any], bool]]:
    """Every input file as (mount, path parts below the workdir, entry, read-only), each
    entry and path checked, so that nothing is downloaded for a bad spec."""
    if not isinstance(inputs, list):
        raise StagingError("spec 'inputs' must be a list")
    plan: list[tuple[str, list[str], dict[str, Any], bool]] = []
    for inp in inputs:
        if not isinstance(inp, dict):
            raise StagingError(f"invalid input entry {inp!r}")
        mount = inp.get("mount", "")
        read_only = inp.get("read_only", False)
        if not isinstance(read_only, bool):
            raise StagingError(f"invalid read_only {read_only!r} in mount {mount!r}: not a boolean")
        for f in inp.get("files") or []:
            _check_file_entry(f, mount)
            plan.append((str(mount), destination(mount, f.get("path")), f, read_only))
    return plan


def _check_file_entry(f: Any, mount: str) -> None:
    if not isinstance(f, dict) or not f.get("url"):
        raise StagingError(f"invalid input file entry {f!r} in mount {mount!r}")
    sha = f.get("sha256")
    if sha is not None and (
        not isinstance(sha, str) or len(sha) != 64 or not set(sha.lower()) <= SHA256_HEX
    ):
        raise StagingError(f"invalid sha256 {sha!r} for input {f.get('path')!r}")


def _stage_file(
    client: Client,
    folder: Dir,
    name: str,
    f: dict[str, Any],
    label: str,
    read_only: bool,
    cache: BlobCache | None,
    log: Callable[[str], None],
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> tuple[str, BlobCache | None]:
    """Put one input file at `name` in `folder`: ("present" | "cached" | "downloaded",
    the cache, None once it proved unusable)."""
    sha = (f.get("sha256") or "").lower() or None
    size = None if f.get("size") is None else int(f["size"])
    how = "downloaded"
    if sha is not None and _present(folder, name, size, sha):
        how = "present"
    else:
        hit = None
        if cache is not None and sha is not None:
            try:
                hit = cache.stage(
                    sha, size, folder, name, link=read_only, cancelled=cancelled,
                    fetch=lambda out: _download(client, f["url"], out, label, size, sha, cancelled, deadline),
                )
            except UnsafePath:
                raise
            except OSError as exc:  # a full or unwritable cache must not fail the job
                log(f"input cache {cache.root} unusable ({exc}); downloading directly")
                cache = None
        if hit is None:
            download_into(client, f["url"], folder, name, label, size, sha, cancelled, deadline)
        elif hit:
            how = "cached"
    if read_only:
        folder.chmod(name, READ_ONLY_MODE)
    return how, cache


class BlobCache:
    """Per-machine cache of verified input files, keyed by sha256.

    Blobs live at ``<root>/<sha[:2]>/<sha256>``, mode 0444, written only after
    their size and sha256 were checked, atomically (temp file + rename). A
    per-blob ``flock`` makes concurrent executors wait for the first download
    instead of fetching the same blob twice. Read-only inputs are hard-linked
    into the workdir (copied when the cache is on another filesystem);
    writable ones are always copied so a job can never alter a cached blob.
    With ``GANTRY_CACHE_MAX_BYTES`` set, least recently used blobs (by atime,
    which the cache sets itself on each use) are evicted beyond that size.
    """

    def __init__(self, root: str, max_bytes: int | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes

    @classmethod
    def from_env(cls, log: Callable[[str], None]) -> BlobCache | None:
        root = os.environ.get("GANTRY_CACHE_DIR") or os.path.join(
            os.path.expanduser("~"), ".cache", "gantry", "blobs"
        )
        raw = os.environ.get("GANTRY_CACHE_MAX_BYTES") or ""
        max_bytes = None
        if raw:
            try:
                max_bytes = int(raw)
            except ValueError:
                log(f"ignoring GANTRY_CACHE_MAX_BYTES={raw!r}: not an integer")
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            log(f"input cache disabled: cannot create {root}: {exc}")
            return None
        return cls(root, max_bytes)

    def path(self, sha: str) -> str:
        return os.path.join(self.root, sha[:2], sha)

    def _valid(self, blob: str, size: int | None) -> bool:
        try:
            st = os.stat(blob)
        except OSError:
            return False
        return size is None or st.st_size == size

    def stage(
        self,
        sha: str,
        size: int | None,
        folder: Dir,
        name: str,
        *,
        link: bool,
        fetch: Callable[[BinaryIO], None],
        cancelled: Callable[[], bool],
    ) -> bool:
        """Put blob ``sha`` at `name` in the job's `folder`; True when it came from the cache."""
        blob = self.path(sha)
        hit = self._valid(blob, size)
        if not hit:
            os.makedirs(os.path.dirname(blob), exist_ok=True)
            with self._lock(blob, cancelled):
                hit = self._valid(blob, size)  # another executor may have fetched it meanwhile
                if not hit:
                    fd, tmp = tempfile.mkstemp(
                        prefix=f".{sha}.", suffix=".part", dir=os.path.dirname(blob)
                    )
                    try:
                        with os.fdopen(fd, "wb") as out:
                            fetch(out)  # verifies size + sha256
                        os.chmod(tmp, READ_ONLY_MODE)
                        os.replace(tmp, blob)
                    finally:
                        _unlink(tmp)
        now = time.time()
        with contextlib.suppress(OSError):
            os.utime(blob, (now, os.stat(blob).st_mtime))  # LRU: record the use
        self._place(blob, folder, name, link)
        return hit

    def _place(self, blob: str, folder: Dir, name: str, link: bool) -> None:
        """Hard-link (read-only inputs) or copy the blob, through the folder's descriptor."""
        part = f".{name}.part"
        folder.remove(part)
        try:
            linked = False
            if link:
                try:
                    folder.link_from(blob, part)
                    linked = True
                except UnsafePath:
                    raise
                except OSError:
                    pass  # other filesystem, or links not supported: copy
            if not linked:
                with open(blob, "rb") as src, folder.create(part) as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
            folder.rename(part, name)
        finally:
            folder.remove(part)

    @contextlib.contextmanager
    def _lock(self, blob: str, cancelled: Callable[[], bool]):  # type: ignore[no-untyped-def]
        if fcntl is None:  # pragma: no cover
            yield
            return
        fd = os.open(blob + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if cancelled():
                        raise StagingCancelled() from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # releases the lock

    def evict(self) -> None:
        if not self.max_bytes or self.max_bytes <= 0:
            return
        blobs: list[tuple[float, int, str]] = []
        total = 0
        for sub in os.scandir(self.root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(sub.path):
                name = entry.name
                if len(name) != 64 or not entry.is_file(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    blobs.append((st.st_atime, st.st_size, entry.path))
                    total += st.st_size
        blobs.sort()
        for _, size, path in blobs:
            if total <= self.max_bytes:
                break
            # A job holding a hard link keeps its copy: the inode outlives the name.
            _unlink(path)
            _unlink(path + ".lock")
            total -= size


def download_into(
    client: Client,
    url: str,
    folder: Dir,
    name: str,
    label: str,
    expected_size: int | None,
    expected_sha: str | None,
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> None:
    """Download to ``.<name>.part`` in the job's `folder`, check it, rename it to `name`
    (all through the folder's descriptor: executor/safefs.py)."""
    part = f".{name}.part"
    try:
        with folder.create(part) as out:
            _download(client, url, out, label, expected_size, expected_sha, cancelled, deadline)
        folder.rename(part, name)
    finally:
        folder.remove(part)


def _download(
    client: Client,
    url: str,
    out: BinaryIO,
    label: str,
    expected_size: int | None,
    expected_sha: str | None,
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> None:
    """Download into the open file `out` (rewritten on every retry), checking its size
    and sha256 (StagingError when they differ)."""
    full = client.resolve(url)
    same_origin = client.same_origin(full)

    def attempt() -> tuple[int, str]:
        try:
            resp = client.open("GET", full, auth=same_origin, fatal=False)
        except HttpError as exc:
            raise StagingError(f"cannot download input {label}: HTTP {exc.status}") from exc
        h = hashlib.sha256()
        n = 0
        try:
            out.seek(0)
            out.truncate()
            with resp:
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
            out.flush()
        except (OSError, http.client.HTTPException) as exc:
            raise RetryableError(f"download of {label} interrupted: {exc}") from exc
        return n, h.hexdigest()

    try:
        size, digest = client.retrying(
            attempt, f"download {label}", interrupted=cancelled, deadline=deadline
        )
    except GiveUp as exc:
        if cancelled():
            raise StagingCancelled() from exc
        raise StagingError(f"cannot download input {label}: {exc}") from exc
    if expected_size is not None and size != expected_size:
        raise StagingError(
            f"input {label}: size mismatch (expected {expected_size} bytes, got {size})"
        )
    if expected_sha is not None and digest != expected_sha:
        raise StagingError(
            f"input {label}: sha256 mismatch (expected {expected_sha}, got {digest})"
        )


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
