"""The executor's only way into a job's files: descriptors that cannot leave the workdir.

The rule (docs/admins/isolation.md): **nothing outside the sandbox opens a job-controlled path by
name with root's rights.** The executor runs as root on the local backend and stages
inputs, code and checkpoints into the job's working directory, and reads its checkpoints
and outputs back, while the job's own code (as another uid, in its own mount namespace)
can create, rename and swap anything in that directory at the same moment. A check by
name followed by an open by name (``islink`` then ``open``, ``realpath`` then ``open``)
loses that race: a job that swaps a folder with a link between the two made root read a
host file. So every access here goes through a descriptor:

* :meth:`Dir.workdir` opens the working directory itself (a path Gantry chose, in a
  folder only root may change) with ``O_NOFOLLOW``;
* every path below it is resolved by ``openat2(2)`` from that descriptor with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: a symbolic link
  anywhere on the path, ``..`` leaving the directory or an absolute path fails (ELOOP,
  EXDEV) instead of being followed. Where the kernel has no ``openat2`` (before 5.6, or a
  seccomp profile that refuses it) the same guarantee comes from walking the path one
  component at a time with ``openat(O_NOFOLLOW)``, refusing ``..``;
* a file is read only after ``fstat`` on its descriptor says it is a regular file, and
  what is hashed or uploaded is read from such a descriptor, never reopened by name;
* calls that take names (``mkdirat``, ``renameat``, ``unlinkat``, ``linkat``,
  ``fchownat``) are given one component relative to a directory descriptor obtained as
  above, and never follow a link in that component (``rmtree`` uses ``shutil``'s
  descriptor-based walk).

A job that moves a folder while the executor holds its descriptor only moves it within
its own working directory (the sandbox sees nothing else), so what the descriptor reaches
stays the job's own.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from typing import BinaryIO

SYS_OPENAT2 = 437  # the same number on every architecture (new syscalls share one table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# getattr: training code imports executor.checkpoints (and so this module) anywhere,
# Windows included, where only its checkpoint() is used.
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


class UnsafePath(OSError):
    """A path of the job's that leads through a link, out of its directory, or to
    something other than what was asked for (a folder, a regular file)."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
except (OSError, TypeError, AttributeError):  # not Linux: the component walk
    _libc = None
# None until the first call finds out; False where the kernel (or seccomp) refuses openat2.
_have_openat2: bool | None = None if _libc is not None else False


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, RESOLVE)
    for _ in range(100):  # EAGAIN: a rename raced the lookup; the kernel asks to retry
        fd = _libc.syscall(
            ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), os.fsencode(rel),
            ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, "path kept changing while it was resolved", rel)


def _components(rel: str) -> list[str]:
    if rel.startswith("/") or "\x00" in rel:
        raise UnsafePath(errno.EXDEV, "not a relative path", rel)
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafePath(errno.EXDEV, "'..' is not allowed", rel)
    return parts


def _walk_open(dirfd: int, rel: str, flags: int, mode: int) -> int:
    """openat2's guarantee without openat2: one component at a time, never following."""
    parts = _components(rel)
    if not parts:
        return os.open(".", flags | os.O_NOFOLLOW, dir_fd=dirfd)
    fd = dirfd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            if fd != dirfd:
                os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=fd)
    finally:
        if fd != dirfd:
            os.close(fd)


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor for `rel` below the directory `dirfd`, resolved without following any
    symbolic link and without leaving it (UnsafePath otherwise)."""
    global _have_openat2
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if _have_openat2 is not False:
            try:
                fd = _openat2(dirfd, rel, flags, mode)
                _have_openat2 = True
                return fd
            except OSError as exc:
                if exc.errno not in (errno.ENOSYS, errno.EPERM) or _have_openat2:
                    raise
                _have_openat2 = False
        return _walk_open(dirfd, rel, flags, mode)
    except OSError as exc:
        if isinstance(exc, UnsafePath):
            raise
        if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
            raise UnsafePath(exc.errno, "a symbolic link or a path leaving the job's folder", rel) from exc
        raise


def _single(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise UnsafePath(errno.EINVAL, "not a single file name", name)
    return name


class Dir:
    """A folder of the job's, held by its descriptor (a context manager: closes it)."""

    def __init__(self, fd: int, label: str) -> None:
        self.fd, self.label = fd, label

    @classmethod
    def workdir(cls, path: str) -> Dir:
        """The job's working directory: Gantry's own path, itself never a link."""
        return cls(os.open(path, DIR_FLAGS | os.O_NOFOLLOW), path)

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _label(self, rel: str) -> str:
        return f"{self.label}/{rel}"

    # -- folders ----------------------------------------------------------------------
    def sub(self, rel: str, *, create: bool = False) -> Dir:
        """The folder `rel` below this one (made, mode 0755, where `create` and missing);
        "" is this folder itself."""
        if not _components(rel):
            return Dir(os.dup(self.fd), self.label)
        if not create:
            return Dir(open_beneath(self.fd, rel, DIR_FLAGS), self._label(rel))
        fd = os.dup(self.fd)
        try:
            for part in _components(rel):
                # Exists: a folder (fine) or anything else (refused by the open below).
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = open_beneath(fd, part, DIR_FLAGS)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return Dir(fd, self._label(rel))

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def entries(self) -> Iterator[tuple[str, int]]:
        """(relative path, st_mode) of everything below, sorted, folders entered through
        :func:`open_beneath` (so never through a link), links reported, not followed."""
        return ((rel, st.st_mode) for rel, st in self.walk())

    def walk(self) -> Iterator[tuple[str, os.stat_result]]:
        """(relative path, lstat) of everything below, as :meth:`entries`. Unlike
        ``os.fwalk``, which opens a subfolder by name without ``O_NOFOLLOW`` and checks it
        only afterwards, a folder swapped for a link is never opened."""
        yield from _entries(self.fd, "")

    def files(self) -> Iterator[str]:
        """Relative paths of the regular files below (links neither followed nor listed)."""
        return (rel for rel, mode in self.entries() if stat.S_ISREG(mode))

    # -- files ------------------------------------------------------------------------
    def open_file(self, rel: str) -> BinaryIO:
        """`rel` for reading, refused unless it is a regular file (checked on the
        descriptor that is then read)."""
        fd = open_beneath(self.fd, rel, READ_FLAGS)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(errno.EINVAL, "not a regular file", self._label(rel))
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")

    def is_file(self, rel: str) -> bool:
        try:
            self.open_file(rel).close()
        except OSError:
            return False
        return True

    def create(self, name: str, mode: int = 0o644) -> BinaryIO:
        """A new, empty file `name` in this folder, for writing (truncated if it exists
        as a regular file; a link or anything else in its place is refused)."""
        fd = open_beneath(self.fd, _single(name), os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, mode)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafePath(errno.EINVAL, "not a regular file", self._label(name))
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "wb")

    def chmod(self, rel: str, mode: int) -> None:
        with self.open_file(rel) as fh:
            os.fchmod(fh.fileno(), mode)

    def mtime(self, rel: str) -> float:
        with self.open_file(rel) as fh:
            return os.fstat(fh.fileno()).st_mtime

    # -- names in this folder ---------------------------------------------------------
    def rename(self, src: str, dst: str) -> None:
        """Replace `dst` by `src` (both names in this folder; links are moved, not followed)."""
        os.replace(_single(src), _single(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def link_from(self, source: str, name: str) -> None:
        """Hard-link Gantry's own file `source` (a path of root's) as `name` here."""
        os.link(source, _single(name), dst_dir_fd=self.fd, follow_symlinks=False)

    def remove(self, name: str) -> None:
        """Remove `name` here, whatever it is (a folder with its contents, descriptor by
        descriptor; a link itself, never what it points to). Missing is fine."""
        name = _single(name)
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=self.fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.fd)


def _entries(dirfd: int, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
    for name in sorted(os.listdir(dirfd)):
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        rel = prefix + name
        yield rel, st
        if stat.S_ISDIR(st.st_mode):
            try:
                fd = open_beneath(dirfd, name, DIR_FLAGS)
            except OSError:
                continue  # swapped for a link (or gone) since the stat: not entered
            try:
                yield from _entries(fd, rel + "/")
            finally:
                os.close(fd)
