"""NVML (nvidia-ml-py) asked about this machine's GPUs: one session per question."""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


def nvml_query(question: Callable[[object], T]) -> T | None:
    """`question(pynvml)` inside an initialised NVML session, or None where there is no
    NVML (no binding, no driver) or it fails; the session is always shut down."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None  # no driver: a machine without GPUs, not an error
    try:
        return question(pynvml)
    except Exception as exc:
        logger.warning("NVML failed: %s", exc)
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvidia_smi_query(fields: str) -> list[list[str]] | None:
    """Rows of `nvidia-smi --query-gpu=<fields>` (CSV, no header, no units), each split
    and stripped; None where nvidia-smi is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[part.strip() for part in line.split(",")] for line in out.splitlines()]
