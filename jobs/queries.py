"""Reading logs back out of LogChunk rows (one row per received batch)."""

import json

from jobs.models import LogChunk


def _expand(chunk, worker):
    for raw in chunk.data.splitlines():
        if raw:
            line = json.loads(raw)
            line["worker"] = worker
            yield line


def log_lines(job, *, worker: int = 0, after: int = 0, limit: int = 1000) -> list[dict]:
    """Lines of one worker with seq > after, in order, at most `limit`."""
    lines: list[dict] = []
    chunks = LogChunk.objects.filter(job=job, worker=worker, last_seq__gt=after).order_by(
        "first_seq"
    )
    for chunk in chunks.iterator(chunk_size=50):
        for line in _expand(chunk, worker):
            if line["seq"] > after:
                lines.append(line)
                if len(lines) >= limit:
                    return lines
    return lines


def tail_lines(job, *, worker: int = 0, count: int = 500) -> list[dict]:
    """The last `count` lines of one worker, oldest first."""
    picked: list[LogChunk] = []
    total = 0
    chunks = LogChunk.objects.filter(job=job, worker=worker).order_by("-first_seq")
    for chunk in chunks.iterator(chunk_size=20):
        picked.append(chunk)
        total += chunk.line_count
        if total >= count:
            break
    lines = [line for chunk in reversed(picked) for line in _expand(chunk, worker)]
    return lines[-count:]
