"""NVML (nvidia-ml-py) asked about this machine's GPUs: one session per question."""

from __future__ import annotations

import contextlib
import logging
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
