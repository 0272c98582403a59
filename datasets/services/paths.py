"""File paths and names in a dataset, and the limits every use case shares."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError

from core.names import check_segments, normal_name

MAX_PATH = 1024
MAX_NAME = 255
MAX_UPLOAD_FILES = 100_000
MAX_PARTS = 10_000  # the S3 limit
SHA256 = re.compile(r"^[0-9a-f]{64}$")
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
BATCH = 5000


def clean_path(path: Any) -> str:
    """A safe relative file path in NFKC (core.names), or ValidationError saying what is
    wrong with it."""
    if not isinstance(path, str) or not path:
        raise ValidationError("A file path is required.")
    given, path = path, normal_name(path)
    shown = repr(given[:100]) + ("" if path == given else f" (read as {path[:100]!r})")
    if "\x00" in path or any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in path):
        raise ValidationError(f"{shown}: file names may not contain control characters.")
    if "\\" in path:
        raise ValidationError(f"{shown}: use / to separate folders, not \\.")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise ValidationError(f"{shown}: absolute paths are not allowed.")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValidationError(f"{shown}: empty, . and .. path segments are not allowed.")
    if len(path.encode()) > MAX_PATH or any(len(p.encode()) > MAX_NAME for p in parts):
        raise ValidationError(f"{shown}: too long (at most {MAX_PATH} bytes, {MAX_NAME} per name).")
    if parts[0] == ".gantry":
        raise ValidationError(f"{shown}: .gantry is reserved.")
    check_segments(path, shown)
    return path


def check_tree(paths: Iterable[str]) -> None:
    """No path may be both a file and a folder (they could not be staged side by side)."""
    files = set(paths)
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in files:
                raise ValidationError(f"“{folder}” is both a file and a folder.")


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"
