"""Snapshotting a directory for `gantry run`: which files go, their hashes, the git state,
and sending only the contents the server does not hold yet.

Ignore rules follow git's: `.gitignore` files at any level (patterns relative to their
directory, `!` re-includes, a later or deeper rule wins, an ignored directory is not
entered) plus `.gantryignore` files read the same way after them; `.git/` and `.gantry/`
are always left out.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from gantry_cli.sdk import Gantry, GantryError

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


def human_size(n: float) -> str:
    """Binary units with one decimal, as Gantry's pages write sizes."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


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


@dataclass
class Uploaded:
    snapshot: dict
    files: int
    blobs_sent: int
    bytes_sent: int

    def summary(self) -> dict:
        return {
            "id": self.snapshot["id"],
            "state": self.snapshot["state"],
            "file_count": self.files,
            "size": self.snapshot.get("size"),
            "uploaded_blobs": self.blobs_sent,
            "uploaded_bytes": self.bytes_sent,
            "git": self.snapshot.get("git"),
        }


def upload(
    g: Gantry,
    project: int,
    tree: Tree,
    git: dict | None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 4,
) -> Uploaded:
    """Creates the snapshot, sends the missing contents (each once, in parallel), finalizes.

    `progress(total_bytes, sent_now)` is called once with 0 sent to size the bar, then
    after each blob."""
    created = g.snapshots.create(project, [f.manifest() for f in tree.files], git)
    missing = set(created.get("missing", []))
    by_hash: dict[str, FileEntry] = {}
    for entry in tree.files:
        if entry.sha256 in missing:
            by_hash.setdefault(entry.sha256, entry)
    total = sum(e.size for e in by_hash.values())
    if progress:
        progress(total, 0)
    sent = 0
    if by_hash:

        def put(entry: FileEntry) -> int:
            with open(entry.source, "rb") as fh:
                g.snapshots.put_blob(created["id"], entry.sha256, fh)
            return entry.size

        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(put, e) for e in by_hash.values()]
            for future in as_completed(futures):
                size = future.result()
                sent += size
                if progress:
                    progress(total, size)
    snapshot = created
    if created.get("state") != "ready":
        snapshot = g.snapshots.finalize(created["id"])
    return Uploaded(snapshot, len(tree.files), len(by_hash), sent)
