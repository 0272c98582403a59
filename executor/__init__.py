"""Gantry executor: the in-job agent, plus a tiny API for training code.

Training code uses :func:`log_metric` and :func:`preemption_requested`; both
work (degraded) outside of Gantry, so scripts stay runnable anywhere.

This module must stay importable with the standard library only and must not
import the rest of the executor (it is imported by user code in the child).
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import sys
import threading
import time

# Standard library only, like this module (executor/checkpoints.py imports the rest lazily).
from .checkpoints import checkpoint, resume_from

__all__ = ["checkpoint", "log_metric", "preemption_requested", "resume_from", "__version__"]
__version__ = "0.1.0"

METRICS_FILE_ENV = "GANTRY_METRICS_FILE"
PREEMPT_FILE_ENV = "GANTRY_PREEMPT_FILE"

_lock = threading.Lock()
_fd: int | None = None
_fd_path: str | None = None
_fd_pid: int | None = None


def _coerce_value(value: object) -> float | None:
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"metric value must be a number, not {type(value).__name__}")
    try:
        number = float(value)  # type: ignore[arg-type]  # numpy/torch scalars
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metric value must be a number, not {type(value).__name__}") from exc
    # NaN/inf losses happen in real training; record them as null rather than
    # crash the training loop.
    return number if math.isfinite(number) else None


def _get_fd(path: str) -> int:
    global _fd, _fd_path, _fd_pid
    pid = os.getpid()
    if _fd is None or _fd_path != path or _fd_pid != pid:
        if _fd is not None and _fd_pid == pid:
            with contextlib.suppress(OSError):
                os.close(_fd)
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_path = path
        _fd_pid = pid
    return _fd


def log_metric(name: str, value: float, step: int | None = None) -> None:
    """Record one metric value.

    Inside a Gantry job this appends a JSON line to ``$GANTRY_METRICS_FILE``
    (one ``write`` with ``O_APPEND``, so it is safe across threads and
    processes). Outside Gantry it prints ``[metric] name=value step=N`` to
    stderr. Non-finite values (NaN, inf) are recorded with value ``null``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("metric name must be a non-empty string")
    number = _coerce_value(value)
    if step is not None:
        if isinstance(step, bool):
            raise TypeError("metric step must be an int or None")
        step = operator.index(step)  # accepts numpy ints, rejects floats
    path = os.environ.get(METRICS_FILE_ENV)
    if not path:
        shown = value if number is None else number
        suffix = "" if step is None else f" step={step}"
        print(f"[metric] {name}={shown}{suffix}", file=sys.stderr, flush=True)
        return
    record = {"name": name, "value": number, "step": step, "ts": time.time()}
    data = (json.dumps(record, allow_nan=False) + "\n").encode("utf-8")
    with _lock:
        fd = _get_fd(path)
        os.write(fd, data)


def preemption_requested() -> bool:
    """True once the executor has been asked to stop the job (cancel, timeout,
    preemption). The executor creates the file *before* sending SIGTERM, so a
    training loop may poll this to checkpoint and exit cleanly."""
    path = os.environ.get(PREEMPT_FILE_ENV)
    return bool(path) and os.path.exists(path)
