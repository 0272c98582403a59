"""The metrics file a command writes (`executor.log_metric`: one JSON object a line),
followed while the command runs and read to its end once it has stopped."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any


def tail_metrics(
    path: str,
    add: Callable[[dict[str, Any]], Any],
    log: Callable[[str], None],
    stop: threading.Event,
) -> None:
    """Hand every metric line appended to `path` to `add` until `stop` is set (then read
    what is left once more). Malformed lines are skipped; the first ten are logged."""
    buf = b""
    pos = 0
    warned = 0
    while True:
        final = stop.is_set()
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                data = fh.read()
        except OSError:
            data = b""
        if data:
            pos += len(data)
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                item = parse_metric(line)
                if item is None:
                    if warned < 10:
                        warned += 1
                        log(f"ignoring malformed metric line: {line[:200]!r}")
                    continue
                add(item)
        if final:
            break
        stop.wait(0.1)


def parse_metric(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    name = rec.get("name")
    if not isinstance(name, str) or not name:
        return None
    value = rec.get("value")
    if isinstance(value, bool) or not (value is None or isinstance(value, (int, float))):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    step = rec.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None
    ts = rec.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        ts = time.time()
    return {"step": step, "name": name, "value": value, "ts": ts}
