"""What the run and compare pages draw: several metrics of several runs, in a few queries.

A history of at most `limit` points comes whole; a longer one comes from its
MetricRollup blocks (each block's lowest and highest point, at their own steps), so a
spike is never averaged away and a million-point metric is a few thousand rows read.
A job's run draws its executor metrics (keys MLflow did not log) from the job's stream.
"""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Q

from tracking.models import Metric, MetricRollup, Run
from tracking.services import job_metrics

POINTS_PER_SERIES = 500


def chart_series(runs: list[Run], keys: list[str], limit: int = POINTS_PER_SERIES) -> dict:
    """{key: {run pk: [[step, value], ...]}} for runs as load_runs gives them (their access
    checked by the caller)."""
    if not runs or not keys:
        return {}
    pks = [run.pk for run in runs]
    counts = {
        (row["run_id"], row["key"]): row["n"]
        for row in Metric.objects.filter(run_id__in=pks, key__in=keys, is_nan=False)
        .values("run_id", "key")
        .annotate(n=Count("pk"))
    }
    whole = [pair for pair, n in counts.items() if n <= limit]
    rolled = [pair for pair, n in counts.items() if n > limit]
    found: dict = defaultdict(dict)
    if whole:
        rows = Metric.objects.filter(_pairs(whole), is_nan=False).order_by("step", "timestamp")
        for run_pk, key, step, value in rows.values_list("run_id", "key", "step", "value"):
            found[key].setdefault(run_pk, []).append([step, value])
    if rolled:
        blocks = MetricRollup.objects.filter(_pairs(rolled)).order_by("block")
        for run_pk, key, low, low_step, high, high_step in blocks.values_list(
            "run_id", "key", "low", "low_step", "high", "high_step"
        ):
            points = sorted({(low_step, low), (high_step, high)})
            found[key].setdefault(run_pk, []).extend([list(p) for p in points])
    for run in runs:
        for row in run.loaded["latest"]:
            if isinstance(row, job_metrics.LatestRow) and row.key in keys:
                points = job_metrics.executor_sampled(run, row.key, limit, None, None)
                found[row.key][run.pk] = [[step, value] for _, step, value, _, _ in points]
    return found


def _pairs(pairs) -> Q:
    by_run: dict = defaultdict(list)
    for run_pk, key in pairs:
        by_run[run_pk].append(key)
    query = Q()
    for run_pk, keys in by_run.items():
        query |= Q(run_id=run_pk, key__in=keys)
    return query
