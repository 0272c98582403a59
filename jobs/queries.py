"""Reading logs back out of LogChunk rows (one row per received batch)."""

import heapq
import json
from collections.abc import Iterator

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
        "last_seq"  # the index order; chunks never overlap, so the same order
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
    chunks = LogChunk.objects.filter(job=job, worker=worker).order_by("-last_seq")
    for chunk in chunks.iterator(chunk_size=20):
        picked.append(chunk)
        total += chunk.line_count
        if total >= count:
            break
    lines = [line for chunk in reversed(picked) for line in _expand(chunk, worker)]
    return lines[-count:]


def lines_before(job, *, worker: int = 0, before: int, limit: int = 1000) -> list[dict]:
    """The last `limit` lines of one worker with seq < before, oldest first ("load earlier")."""
    picked: list[LogChunk] = []
    total = 0
    # Chunks of one worker never overlap, so last_seq orders them as first_seq does,
    # and (job, worker, last_seq) is the index.
    chunks = LogChunk.objects.filter(job=job, worker=worker, first_seq__lt=before).order_by(
        "-last_seq"
    )
    for chunk in chunks.iterator(chunk_size=20):
        picked.append(chunk)
        total += min(chunk.line_count, before - chunk.first_seq)
        if total >= limit:
            break
    lines = [
        line
        for chunk in reversed(picked)
        for line in _expand(chunk, worker)
        if line["seq"] < before
    ]
    return lines[-limit:]


def count_lines_after(job, *, worker: int, after: int) -> int:
    """About how many lines of one worker have seq > after (whole chunks; cheap)."""
    from django.db.models import Sum

    total = LogChunk.objects.filter(job=job, worker=worker, last_seq__gt=after).aggregate(
        n=Sum("line_count")
    )["n"]
    return total or 0


def iter_lines(job, *, worker: int) -> Iterator[dict]:
    """Every line of one worker in seq order, a few chunks in memory at a time."""
    # Keyset pages rather than one open cursor: a download may take minutes, and a
    # streamed response's steps may run on different threads' connections.
    after = 0
    while True:
        page = list(
            LogChunk.objects.filter(job=job, worker=worker, last_seq__gt=after).order_by(
                "last_seq"
            )[:50]
        )
        for chunk in page:
            yield from _expand(chunk, worker)
        if len(page) < 50:
            return
        after = page[-1].last_seq


def iter_interleaved(job, workers: list[int]) -> Iterator[dict]:
    """Every line of several workers, merged by timestamp (each worker's own order kept)."""
    return heapq.merge(
        *(iter_lines(job, worker=w) for w in workers), key=lambda line: line.get("ts") or 0
    )
