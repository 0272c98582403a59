"""Snapshotting a directory for `gantry run`: which files go, their hashes, the git state,
and sending only the contents the server does not hold yet.

Ignore rules follow git's: `.gitignore` files at any level (patterns relative to their
directory, `!` re-includes, a later or deeper rule wins, an ignored directory is not
entered) plus `.gantryignore` files read the same way after them; `.git/` and `.gantry/`
are always left out.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from gantry_cli.sdk import Gantry, GantryError
from gantry_cli.ui import Bar, human_size

ALWAYS_SKIPPED = {".git", ".gantry"}
IGNORE_FILES = (".gitignore", ".gantryignore")
CHUNK = 1024 * 1024
MiB = 1024 * 1024


@dataclass
class FileEntry:
    path: str  # relative, with '/'
    size: int
    mode: int
    source: Path
    sha256: str = ""

    def manifest(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "mode": self.mode}


@dataclass
class Tree:
    root: Path
    files: list[FileEntry] = field(default_factory=list)
    skipped_links: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class TooBig(GantryError):
    exit_code = 2


def _spec_of(folder: Path) -> pathspec.GitIgnoreSpec | None:
    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (folder / name).read_text(errors="replace").splitlines()
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _ignored(specs: list[tuple[str, pathspec.GitIgnoreSpec]], rel: str, is_dir: bool) -> bool:
    """The deepest ignore file with an opinion on `rel` decides (git's precedence)."""
    verdict = False
    for base, spec in specs:
        sub = rel[len(base) + 1 :] if base else rel
        result = spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            verdict = result.include
    return verdict


def collect(root: Path, extra_ignores: list[str] | None = None) -> Tree:
    """The files a snapshot of `root` holds, in path order (not hashed yet)."""
    root = root.resolve()
    tree = Tree(root)
    top = _spec_of(root)
    extra = pathspec.GitIgnoreSpec.from_lines(extra_ignores) if extra_ignores else None
    base_specs = [("", s) for s in (top, extra) if s is not None]

    def walk(folder: Path, rel_dir: str, specs):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except PermissionError:
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.name in ALWAYS_SKIPPED and entry.is_dir(follow_symlinks=False):
                continue
            if entry.is_symlink():
                if not _ignored(specs, rel, entry.is_dir()):
                    tree.skipped_links.append(rel)
                continue
            if entry.is_dir():
                if _ignored(specs, rel, True):
                    continue
                own = _spec_of(Path(entry.path))
                walk(Path(entry.path), rel, specs + [(rel, own)] if own else specs)
            elif entry.is_file() and not _ignored(specs, rel, False):
                info = entry.stat()
                tree.files.append(
                    FileEntry(rel, info.st_size, stat.S_IMODE(info.st_mode), Path(entry.path))
                )

    walk(root, "", base_specs)
    tree.files.sort(key=lambda f: f.path)
    return tree


def check_limits(tree: Tree, max_files: int, max_mb: float) -> None:
    """Refuses a tree over the limits, naming its biggest files (and how to leave them out)."""
    too_many = len(tree.files) > max_files
    too_big = tree.size > max_mb * MiB
    if not (too_many or too_big):
        return
    biggest = sorted(tree.files, key=lambda f: f.size, reverse=True)[:5]
    named = ", ".join(f"{f.path} ({human_size(f.size)})" for f in biggest)
    what = (
        f"{len(tree.files):,} files (the limit is {max_files:,})"
        if too_many
        else f"{human_size(tree.size)} (the limit is {max_mb:g} MiB)"
    )
    raise TooBig(
        f"{tree.root} holds {what}; the biggest files: {named}. "
        "Leave data and outputs out with a .gantryignore (git's syntax), "
        "and send data as a dataset (`gantry datasets push`)."
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def hash_files(tree: Tree, workers: int = 4) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for entry, digest in zip(
            tree.files, pool.map(lambda f: file_sha256(f.source), tree.files), strict=True
        ):
            entry.sha256 = digest


def git_state(root: Path) -> dict | None:
    """{"commit", "dirty", "branch"} when `root` is inside a git checkout, else None."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if git("rev-parse", "--is-inside-work-tree") != "true":
        return None
    commit = git("rev-parse", "HEAD") or ""
    branch = git("rev-parse", "--abbrev-ref", "HEAD") or ""
    status = git("status", "--porcelain", "--untracked-files=normal", "--", ".")
    return {
        "commit": commit,
        "dirty": bool(status) if status is not None else None,
        "branch": "" if branch == "HEAD" else branch,
    }


# Missing contents travel many to a request, as the job form sends them: a tar of up to
# about BATCH_BYTES / BATCH_FILES whose members are named by their sha256 (one request per
# small file costs more than its bytes). A file bigger than a batch goes alone, by PUT.
BATCH_BYTES = 4 * MiB
BATCH_FILES = 500
IN_FLIGHT = 4
BLOCK = tarfile.BLOCKSIZE
WRITE = 256 * 1024


class Changed(GantryError):
    exit_code = 2


def plan(entries: list[FileEntry], batch_bytes: int = BATCH_BYTES,
         batch_files: int = BATCH_FILES) -> tuple[list[list[FileEntry]], list[FileEntry]]:  # fmt: skip
    """(tar batches, files sent alone): contents in the given order, each batch at most
    `batch_bytes` of contents and `batch_files` members; a file over `batch_bytes` goes alone."""
    batches: list[list[FileEntry]] = []
    alone: list[FileEntry] = []
    current: list[FileEntry] = []
    size = 0
    for entry in entries:
        if entry.size > batch_bytes:
            alone.append(entry)
            continue
        if current and (size + entry.size > batch_bytes or len(current) >= batch_files):
            batches.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.size
    return batches + ([current] if current else []), alone


def _padding(size: int) -> int:
    return -size % BLOCK


def tar_length(entries: list[FileEntry]) -> int:
    """The exact length of `tar_stream(entries)`: a header block per member, its bytes
    padded to a block, and the two zero blocks that end an archive."""
    return sum(BLOCK + e.size + _padding(e.size) for e in entries) + 2 * BLOCK


def _read_exactly(entry: FileEntry) -> Iterator[bytes]:
    left = entry.size
    with open(entry.source, "rb") as fh:
        while left:
            chunk = fh.read(min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
        if left or fh.read(1):
            raise Changed(f"{entry.path} changed while it was being sent; run again")


def tar_stream(
    entries: list[FileEntry], sent: Callable[[int], None] | None = None
) -> Iterator[bytes]:
    """A tar of `entries` (members named by sha256) built as it is read, in pieces of
    about WRITE bytes (small members' headers and bytes gathered: one socket write each
    piece, not three per file); `sent(size)` after each member's bytes."""
    pending: list[bytes] = []
    held = 0
    for entry in entries:
        info = tarfile.TarInfo(entry.sha256)
        info.size, info.mode = entry.size, 0o644
        padding = bytes(_padding(entry.size))
        header = info.tobuf(format=tarfile.USTAR_FORMAT)
        for piece in itertools.chain((header,), _read_exactly(entry), (padding,)):
            pending.append(piece)
            held += len(piece)
            if held >= WRITE:
                yield b"".join(pending)
                pending, held = [], 0
        if sent:
            sent(entry.size)
    yield b"".join(pending) + bytes(2 * BLOCK)


@dataclass
class Uploaded:
    snapshot: dict
    files: int
    blobs_sent: int
    bytes_sent: int
    requests: int = 1  # the manifest's POST, the tars, the PUTs and the finalize
    batches: int = 0
    puts: int = 0

    def summary(self) -> dict:
        return {
            "id": self.snapshot["id"],
            "state": self.snapshot["state"],
            "file_count": self.files,
            "size": self.snapshot.get("size"),
            "uploaded_blobs": self.blobs_sent,
            "uploaded_bytes": self.bytes_sent,
            "upload_requests": self.requests,
            "git": self.snapshot.get("git"),
        }

    def line(self) -> str:
        """What `run` and `sweep start` say on stderr about the code they sent."""
        return (
            f"code: snapshot {self.snapshot['id']}, {self.files} files, "
            f"{self.blobs_sent} new ({human_size(self.bytes_sent)} sent)"
        )


def upload(
    g: Gantry,
    project: int,
    tree: Tree,
    git: dict | None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = IN_FLIGHT,
) -> Uploaded:
    """Creates the snapshot, sends the missing contents (each once: small ones in tar
    batches, a big one alone; at most `workers` requests in flight), finalizes.

    `progress(total_bytes, sent_now)` is called once with 0 sent to size the bar, then as
    each content's bytes go out."""
    created = g.snapshots.create(project, [f.manifest() for f in tree.files], git)
    missing = set(created.get("missing", []))
    by_hash: dict[str, FileEntry] = {}
    for entry in tree.files:
        if entry.sha256 in missing:
            by_hash.setdefault(entry.sha256, entry)
    total = sum(e.size for e in by_hash.values())
    if progress:
        progress(total, 0)
    batches, alone = plan(list(by_hash.values()))
    lock = threading.Lock()
    sent = 0

    def count(size: int) -> None:
        nonlocal sent
        with lock:
            sent += size
        if progress:
            progress(total, size)

    def send_tar(batch: list[FileEntry]) -> None:
        g.snapshots.put_blobs(created["id"], tar_stream(batch, count), tar_length(batch))

    def put(entry: FileEntry) -> None:
        with open(entry.source, "rb") as fh:
            g.snapshots.put_blob(created["id"], entry.sha256, fh)
        count(entry.size)

    if by_hash:
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(put, e) for e in alone]
            futures += [pool.submit(send_tar, b) for b in batches]
            for future in as_completed(futures):
                future.result()
    snapshot = created
    requests = 1 + len(batches) + len(alone)
    if created.get("state") != "ready":
        snapshot = g.snapshots.finalize(created["id"])
        requests += 1
    return Uploaded(
        snapshot, len(tree.files), len(by_hash), sent, requests, len(batches), len(alone)
    )


def send_folder(g: Gantry, project: int, directory: Path, ignore: list[str] | None = None,
                quiet: bool = False) -> Uploaded:  # fmt: skip
    """`directory` as a code snapshot of `project` (git's ignore rules plus `ignore`), over
    the limits named by GANTRY_SNAPSHOT_MAX_FILES / _MB: what `run` and `sweep start` send."""
    tree = collect(directory, ignore or [])
    check_limits(
        tree,
        int(os.environ.get("GANTRY_SNAPSHOT_MAX_FILES", 20000)),
        float(os.environ.get("GANTRY_SNAPSHOT_MAX_MB", 200)),
    )
    hash_files(tree)
    with Bar("uploading code", enabled=not quiet) as bar:
        return upload(g, project, tree, git_state(directory), progress=bar)
