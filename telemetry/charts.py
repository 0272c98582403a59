"""A job's GPU samples as chart series: utilization and memory per GPU over time."""

from __future__ import annotations

from collections import defaultdict

from jobs.models import Job
from telemetry.services import MEMORY, UTILIZATION, gpu_points

MAX_POINTS = 600  # per series: samples are averaged into at most this many buckets


def job_series(job: Job) -> dict:
    """{"utilization": {...}, "memory": {...}}, each {"x": [unix s], "labels": [...],
    "y": [[value or None per x] per GPU]}; GPUs are labelled by worker and position."""
    return {
        "utilization": _series(job, UTILIZATION),
        "memory": _series(job, MEMORY),
    }


def _series(job: Job, suffix: str) -> dict:
    points = list(
        gpu_points(suffix)
        .filter(job=job, value__isnull=False)
        .order_by("ts")
        .values_list("worker", "name", "ts", "value")
    )
    if not points:
        return {"x": [], "labels": [], "y": []}
    first, last = points[0][2].timestamp(), points[-1][2].timestamp()
    bucket = max(1.0, (last - first) / MAX_POINTS)
    sums: dict[tuple, dict[int, list[float]]] = defaultdict(dict)
    for worker, name, ts, value in points:
        slot = int((ts.timestamp() - first) // bucket)
        acc = sums[(worker, name.split("/", 1)[0])].setdefault(slot, [0.0, 0])
        acc[0] += value
        acc[1] += 1
    keys = sorted(sums)
    slots = sorted({slot for series in sums.values() for slot in series})
    multi = len({w for w, _ in keys}) > 1
    return {
        "x": [round(first + slot * bucket, 3) for slot in slots],
        "labels": [f"w{w} {gpu}" if multi else gpu for w, gpu in keys],
        "y": [
            [round(sums[key][s][0] / sums[key][s][1], 1) if s in sums[key] else None for s in slots]
            for key in keys
        ],
    }
