"""Checkpoints: saved by training code, uploaded by the executor, staged back on resume.

Training code (standard library only, safe to import in the job):

* ``checkpoint(path, step=..., metrics=...)`` copies a file or folder into
  ``$GANTRY_CHECKPOINT_DIR/<name>/`` (``<workdir>/checkpoints/``), writes the
  ``.complete`` marker last and renames the folder into place; ``resume_from()`` is
  ``$GANTRY_RESUME_FROM`` (or None).
* Code that only writes files may write ``checkpoints/<name>/`` itself. **A folder counts
  once its ``.complete`` marker exists** (never on a guess that it stopped changing: a
  slow writer would be uploaded half-written). The marker may hold JSON
  ``{"step": 100, "metrics": {"loss": 0.1}}``; it is not uploaded.

The executor (`CheckpointAgent`, worker 0 only) watches that folder and uploads each
marked folder atomically: announce the files (path, size, sha256), PUT the ones the
server lacks, commit; Gantry lists the checkpoint only after the commit found every file.
Before the command starts, every worker stages the job's latest *complete* checkpoint
into ``checkpoints/<name>/`` (downloaded into a hidden folder, checked, then renamed) and
sets ``GANTRY_RESUME_FROM`` to it. On a preemption the command gets the save window:
the preempt file appears, then SIGTERM only after ``save_seconds`` (none if the command
exits by itself; ``SAVED_GRACE_SECONDS`` after a checkpoint it wrote since the request
has been saved, if it keeps running).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, BinaryIO

from .safefs import Dir, UnsafePath

CHECKPOINT_DIR_ENV = "GANTRY_CHECKPOINT_DIR"
RESUME_ENV = "GANTRY_RESUME_FROM"
MARKER = ".complete"
FOLDER = "checkpoints"
SCAN_SECONDS = 1.0
# After a checkpoint saved in the preemption save window, how long the command may take to
# exit by itself before SIGTERM.
SAVED_GRACE_SECONDS = 3.0


def _valid_name(name: str) -> bool:
    ok = name[:1].isalnum() and len(name) <= 200
    return ok and all(c.isalnum() or c in "._-" for c in name)


# --- training code's side ---------------------------------------------------------------


def checkpoint(
    path: str,
    step: int | None = None,
    metrics: dict[str, float] | None = None,
    name: str | None = None,
) -> str | None:
    """Save ``path`` (a file or a folder) as a checkpoint named ``name`` (default
    ``step-<step>``). Returns the checkpoint's folder, or None outside Gantry (where it
    only says so on stderr, so scripts run anywhere)."""
    root = os.environ.get(CHECKPOINT_DIR_ENV)
    if not root:
        import sys

        print(f"[checkpoint] {path} step={step} (not in a Gantry job: not uploaded)", file=sys.stderr)
        return None
    if name is None:
        name = f"step-{step:09d}" if step is not None else f"t-{int(time.time() * 1000)}"
    if not _valid_name(name):
        raise ValueError(f"checkpoint name {name!r}: letters, digits, '.', '_', '-' only")
    os.makedirs(root, exist_ok=True)
    tmp = os.path.join(root, f".tmp-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if os.path.isdir(path):
        shutil.copytree(path, tmp, symlinks=False)
    else:
        os.makedirs(tmp)
        shutil.copy2(path, os.path.join(tmp, os.path.basename(path)))
    meta = {"step": step, "metrics": {k: float(v) for k, v in (metrics or {}).items()}}
    with open(os.path.join(tmp, MARKER), "w") as fh:
        json.dump(meta, fh)
    final = os.path.join(root, name)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    return final


def resume_from() -> str | None:
    """The staged checkpoint folder this attempt resumes from, or None."""
    return os.environ.get(RESUME_ENV) or None


# --- the executor's side ----------------------------------------------------------------


def _sha256(fh: BinaryIO) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    while chunk := fh.read(1024 * 1024):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def _hash(folder: Dir, rel: str) -> tuple[int, str]:
    with folder.open_file(rel) as fh:
        return _sha256(fh)


def _meta(folder: Dir) -> dict[str, Any]:
    try:
        with folder.open_file(MARKER) as fh:
            meta = json.loads(fh.read(64 * 1024))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


class CheckpointAgent:
    """One worker's checkpoint duties: stage for a resume, watch and upload (worker 0),
    and hold a preempted command's SIGTERM for the save window."""

    def __init__(self, client: Any, workdir: str, worker: int, log: Callable[[str], None],
                 sandboxed: object) -> None:
        self.client, self.workdir, self.worker, self.log = client, workdir, worker, log
        self.sandboxed = sandboxed is not None
        self.root = os.path.join(workdir, FOLDER)
        # Uploaded (or refused) folders, kept across executors of a reused workdir, so a
        # folder retention deleted on the server is not uploaded again after a requeue.
        self.done_file = os.path.join(workdir, ".gantry", "checkpoints-done")
        self.done: set[str] = set()
        try:
            with open(self.done_file) as fh:
                self.done = {line.strip() for line in fh if line.strip()}
        except OSError:
            pass
        self.last_marker = 0.0  # wall time of the newest committed checkpoint's marker
        self.staged: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- resume ---------------------------------------------------------------------
    def stage(self, cancelled: Callable[[], bool], deadline: float | None) -> None:
        """Stage the job's latest complete checkpoint (raises StagingError on failure)."""
        from .client import GiveUp, HttpError
        from .staging import StagingCancelled, StagingError

        try:
            with Dir.workdir(self.workdir) as work:
                work.sub(FOLDER, create=True).close()
        except UnsafePath as exc:
            raise StagingError(f"refused to stage checkpoints: {exc}") from exc
        try:
            answer = self.client.retrying(
                lambda: self._get("checkpoints/latest"), "GET checkpoints/latest",
                interrupted=cancelled, deadline=deadline,
            )
        except (HttpError, GiveUp) as exc:
            if isinstance(exc, HttpError) and exc.status in (404, 405, 501):
                return  # a Gantry without checkpoints (or the job is gone: the run says so)
            if cancelled():
                raise StagingCancelled() from exc
            raise StagingError(f"cannot look up the checkpoint to resume from: {exc}") from exc
        found = answer.get("checkpoint") if isinstance(answer, dict) else None
        if not found:
            return
        name, files = str(found["name"]), found["files"]
        if not _valid_name(name):
            raise StagingError(f"refused checkpoint name {name!r}")
        try:
            with Dir.workdir(self.workdir) as work, work.sub(FOLDER, create=True) as root:
                if not self._intact(root, name, files):
                    self._download(root, name, found, cancelled, deadline)
        except UnsafePath as exc:
            raise StagingError(f"refused to stage checkpoint {name}: {exc}") from exc
        dest = os.path.join(self.root, name)
        self.staged = dest
        self._mark_done(name)
        self.log(f"resuming from checkpoint {name} (step {found.get('step')}): {RESUME_ENV}={self._inside(dest)}")

    def _download(self, root: Dir, name: str, found: dict, cancelled: Callable[[], bool],
                  deadline: float | None) -> None:
        """Download into ``.staging-<name>``, then rename it over ``<name>``: all inside
        the descriptor of ``checkpoints/``, so a link the job left there is removed as a
        link, never followed."""
        from .staging import StagingError, _check_rel, download_into

        tmp_name = f".staging-{name}"
        root.remove(tmp_name)
        with root.sub(tmp_name, create=True) as tmp:
            for f in found["files"]:
                parts = _check_rel(f["path"], "checkpoint path")
                if not parts or parts[0] == MARKER:
                    raise StagingError(f"refused checkpoint path {f['path']!r}")
                url = self.client.url(
                    f"checkpoints/{found['id']}/files/{urllib.parse.quote(f['path'])}"
                )
                folder = tmp.sub("/".join(parts[:-1]), create=True) if len(parts) > 1 else None
                try:
                    download_into(self.client, url, folder or tmp, parts[-1],
                                  f"checkpoint {name}/{f['path']}", f["size"], f["sha256"],
                                  cancelled, deadline)
                finally:
                    if folder is not None:
                        folder.close()
            with tmp.create(MARKER) as fh:
                fh.write(json.dumps({"step": found.get("step"), "metrics": {}}).encode())
        root.remove(name)
        root.rename(tmp_name, name)

    def _get(self, path: str) -> Any:
        """GET JSON without taking a 404 for a revoked token (an older Gantry has no
        checkpoint endpoints; the spec and heartbeats tell a revoked job)."""
        from .client import RetryableError

        resp = self.client.open("GET", self.client.url(path),
                                headers={"Accept": "application/json"}, fatal=False)
        with resp:
            try:
                return json.loads(resp.read() or b"{}")
            except (OSError, ValueError) as exc:
                raise RetryableError(f"GET {path}: {exc}") from exc

    def _intact(self, root: Dir, name: str, files: list[dict]) -> bool:
        """A folder left in a reused working directory that already holds every file."""
        try:
            with root.sub(name) as dest:
                if not dest.is_file(MARKER):
                    return False
                return all(_hash(dest, f["path"]) == (f["size"], f["sha256"]) for f in files)
        except (OSError, KeyError, TypeError):
            return False

    def _inside(self, path: str) -> str:
        if not self.sandboxed:
            return path
        from .sandbox import inside

        return inside(path, self.workdir)

    def env(self) -> dict[str, str]:
        env = {CHECKPOINT_DIR_ENV: self._inside(self.root)}
        if self.staged:
            env[RESUME_ENV] = self._inside(self.staged)
        return env

    # -- watch and upload -------------------------------------------------------------
    def start(self) -> None:
        if self.worker != 0:
            return
        self._thread = threading.Thread(target=self._watch, name="checkpoints", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(SCAN_SECONDS):
            self.scan()

    def finish(self) -> None:
        """The command ended: upload what it saved last (bounded by the client's deadline)."""
        if self.worker != 0:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.scan()

    def scan(self) -> None:
        with self._lock:
            try:
                work = Dir.workdir(self.workdir)
            except OSError:
                return
            try:
                with work, work.sub(FOLDER) as root:
                    for name in root.names():
                        if name.startswith(".") or name in self.done:
                            continue
                        self._consider(root, name)
            except OSError:
                return  # no checkpoints folder (yet), or a link in its place

    def _consider(self, root: Dir, name: str) -> None:
        """Upload `name` once its marker exists; a link (or a file) in its place is the
        job's mistake or an attack: said once, never followed."""
        try:
            folder = root.sub(name)
        except UnsafePath:
            self.log(f"checkpoint {name!r} ignored: not a folder (a symbolic link is never followed)")
            self._mark_done(name)
            return
        except OSError:
            return  # gone meanwhile
        with folder:
            if folder.is_file(MARKER):
                self._upload(name, folder)

    def _upload(self, name: str, folder: Dir) -> None:
        from .client import GiveUp, HttpError

        if not _valid_name(name):
            self.log(f"checkpoint folder {name!r} ignored: letters, digits, '.', '_', '-' only")
            self._mark_done(name)
            return
        meta = _meta(folder)
        step = meta.get("step") if isinstance(meta.get("step"), int) else None
        try:
            # Hashed and uploaded from descriptors (executor/safefs.py): a file swapped for
            # a link after it was listed is refused, not followed.
            files = [(rel, *_hash(folder, rel)) for rel in folder.files() if rel != MARKER]
            body = {
                "worker": self.worker, "name": name, "step": step,
                "metrics": meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {},
                "files": [{"path": r, "size": s, "sha256": h} for r, s, h in files],
            }
            answer = self.client.json("POST", "checkpoints", body)
            if answer.get("state") != "complete":
                by_path = {r: (s, h) for r, s, h in files}
                for rel in answer.get("missing", []):
                    size, sha = by_path[rel]
                    path = f"checkpoints/{answer['id']}/files/{urllib.parse.quote(rel)}"
                    self.client.put_file(path, lambda rel=rel: folder.open_file(rel), size,
                                         {"X-Gantry-Sha256": sha})
                self.client.json("POST", f"checkpoints/{answer['id']}/commit", {"worker": self.worker})
                self.last_marker = max(self.last_marker, folder.mtime(MARKER))
                size = sum(s for _, s, _ in files)
                self.log(f"checkpoint {name} (step {step}) saved: {len(files)} file(s), {size} bytes")
        except HttpError as exc:  # refused (quota, bad name): said once, not retried
            self.log(f"checkpoint {name} not saved: {exc}")
        except UnsafePath as exc:  # a file swapped for a link while it was read
            self.log(f"checkpoint {name} not saved: {exc}")
        except (GiveUp, OSError) as exc:  # next scan tries again
            self.log(f"checkpoint {name} not uploaded yet: {exc}")
            return
        self._mark_done(name)

    def _mark_done(self, name: str) -> None:
        self.done.add(name)
        try:
            os.makedirs(os.path.dirname(self.done_file), exist_ok=True)
            with open(self.done_file, "a") as fh:
                fh.write(name + "\n")
        except OSError:
            pass

    # -- preemption -----------------------------------------------------------------
    def save_window(self, proc: Any, stopping_for_cancel: bool) -> bool:
        """On a preemption, give the command its save window before SIGTERM: the preempt
        file exists already; wait until it exits, saves a new checkpoint, or time is up.
        True when the command exited by itself inside the window (no SIGTERM needed)."""
        if not stopping_for_cancel:
            return False
        try:
            answer = self._get("checkpoints/save-window")
        except Exception:  # no answer: stop as before, without a window
            return False
        seconds = float(answer.get("save_seconds") or 0) if answer.get("preempt") else 0.0
        if seconds <= 0:
            return False
        self.log(f"preempted: the command has {seconds:g} s to save a checkpoint before SIGTERM")
        # A checkpoint written after the request (not one from before, still uploading)
        # ends the window early: the command then has a moment to exit by itself.
        asked, end = time.time(), time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            if self.last_marker >= asked:
                self.log("checkpoint saved inside the save window")
                end = min(end, time.monotonic() + SAVED_GRACE_SECONDS)
                asked = float("inf")
            time.sleep(0.1)
        if proc.poll() is not None:
            self.log("the command stopped by itself inside the save window")
            return True
        return False
