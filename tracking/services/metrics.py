"""Metric points: checking them on the way in, storing them (history, each key's latest
value, the MetricRollup blocks charts read), and reading histories back."""

from __future__ import annotations

import math
from typing import NamedTuple

from django.db import connection
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Max, Min, Value

from tracking.errors import invalid
from tracking.models import LatestMetric, Metric, MetricRollup, Run
from tracking.services import job_metrics
from tracking.services.access import Caller, get_run
from tracking.services.validation import MAX_KEY_LENGTH, integer, text, valid_key

MAX_RESULTS_HISTORY = 25000


class Point(NamedTuple):
    """A metric value on its way in (no model instance: 1,000 of them per batch)."""

    key: str
    value: float
    is_nan: bool
    timestamp: int
    step: int


def metric_point(item) -> Point:
    if not isinstance(item, dict):
        raise invalid("Every metric is an object with key, value, timestamp and step.")
    key = valid_key(item.get("key"), "key")
    value = item.get("value")
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        value = float(value.replace("Infinity", "inf"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"Got invalid value {value!r} for metric '{key}': a number.")
    value = float(value)
    timestamp = integer(item.get("timestamp"), "timestamp")
    if timestamp is None:
        raise invalid(f"Missing value for required parameter 'timestamp' of metric '{key}'.")

    step = integer(item.get("step"), "step", default=0)
    nan = math.isnan(value)
    return Point(key, 0.0 if nan else value, nan, timestamp, step)


def _newer(a: Point | LatestMetric, b: Point | LatestMetric) -> bool:
    """MLflow's latest-metric order: step, then timestamp, then value (NaN lowest)."""
    return (a.step, a.timestamp, not a.is_nan, a.value) > (
        b.step,
        b.timestamp,
        not b.is_nan,
        b.value,
    )


def _new_points(run: Run, points: list[Point]) -> list[Point]:
    """The points not stored yet. A point is its key, value, timestamp and step, as in
    MLflow's store (its primary key): the same point again, in one batch or in a
    client's retry of a request whose answer it missed, is the same point, not another
    (a retried first log_metric made a 100-call history 101 points, step 0 twice)."""
    points = list(dict.fromkeys(points))
    stored = set(
        Metric.objects.filter(
            run=run,
            key__in={p.key for p in points},
            step__in={p.step for p in points},
            timestamp__in={p.timestamp for p in points},
        ).values_list("key", "value", "is_nan", "timestamp", "step")
    )
    return [p for p in points if tuple(p) not in stored]


def store_metrics(run: Run, points: list[Point]) -> None:
    """Append metric points and move each key's latest value (inside the caller's
    transaction, with the run's row locked).

    The points go in with one executemany, not bulk_create: building and preparing a
    model instance per point cost more than the insert itself (0.4 of 0.5 s a 1,000-point
    batch on a busy machine)."""
    points = _new_points(run, points)
    if not points:
        return
    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in ("run_id", "key", "value", "is_nan", "timestamp", "step"))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {quote(Metric._meta.db_table)} ({columns}) VALUES (%s, %s, %s, %s, %s, %s)",
            [(run.pk, p.key, p.value, p.is_nan, p.timestamp, p.step) for p in points],
        )
    _roll_up(run, points)
    best: dict[str, Point] = {}
    for point in points:
        if point.key not in best or _newer(point, best[point.key]):
            best[point.key] = point
    current = {m.key: m for m in LatestMetric.objects.filter(run=run, key__in=best)}
    changed, fresh = [], []
    for key, point in best.items():
        row = current.get(key)
        if row is None:
            fresh.append(
                LatestMetric(
                    run=run,
                    key=key,
                    value=point.value,
                    is_nan=point.is_nan,
                    timestamp=point.timestamp,
                    step=point.step,
                )
            )
        elif _newer(point, row):
            row.value, row.is_nan, row.timestamp, row.step = (
                point.value,
                point.is_nan,
                point.timestamp,
                point.step,
            )
            changed.append(row)
    LatestMetric.objects.bulk_create(fresh)
    LatestMetric.objects.bulk_update(changed, ["value", "is_nan", "timestamp", "step"])


def _roll_up(run: Run, points: list[Point]) -> None:
    """Fold a batch into its metrics' MetricRollup blocks (NaN left out)."""
    size = MetricRollup.ROLLUP_STEPS
    blocks: dict[tuple[str, int], list] = {}
    for p in points:
        if p.is_nan:
            continue
        entry = blocks.get((p.key, p.step // size))
        if entry is None:
            blocks[(p.key, p.step // size)] = [p.value, p.step, p.value, p.step, 1, p.timestamp]
            continue
        if p.value < entry[0]:
            entry[0], entry[1] = p.value, p.step
        if p.value > entry[2]:
            entry[2], entry[3] = p.value, p.step
        entry[4] += 1
        entry[5] = max(entry[5], p.timestamp)
    if not blocks:
        return
    keys = {k for k, _ in blocks}
    numbers = {b for _, b in blocks}
    existing = {
        (r.key, r.block): r
        for r in MetricRollup.objects.filter(run=run, key__in=keys, block__in=numbers)
    }
    fresh, changed = [], []
    for (key, block), (low, low_step, high, high_step, count, ts) in blocks.items():
        row = existing.get((key, block))
        if row is None:
            fresh.append(
                MetricRollup(
                    run=run,
                    key=key,
                    block=block,
                    low=low,
                    low_step=low_step,
                    high=high,
                    high_step=high_step,
                    count=count,
                    timestamp=ts,
                )
            )
            continue
        if low < row.low:
            row.low, row.low_step = low, low_step
        if high > row.high:
            row.high, row.high_step = high, high_step
        row.count += count
        row.timestamp = max(row.timestamp, ts)
        changed.append(row)
    MetricRollup.objects.bulk_create(fresh)
    MetricRollup.objects.bulk_update(
        changed, ["low", "low_step", "high", "high_step", "count", "timestamp"]
    )


def metric_history(caller: Caller, run_id, key, max_results=None, offset=0):
    run = get_run(caller, run_id)
    key = text(key, "metric_key", MAX_KEY_LENGTH)
    limit = integer(max_results, "max_results", default=MAX_RESULTS_HISTORY, minimum=1)
    if job_metrics.reads_from_job(run, key):
        return job_metrics.executor_history(run, key, limit, offset)
    rows = list(
        Metric.objects.filter(run=run, key=key)
        .order_by("step", "timestamp", "pk")
        .values_list("key", "value", "is_nan", "timestamp", "step")[offset : offset + limit + 1]
    )
    return rows[:limit], (offset + limit if len(rows) > limit else None)


def sampled_history(caller: Caller, run_ids, key, max_results=None, start_step=None, end_step=None):
    """A chart's read of long metric histories: at most `max_results` points a run.

    Short histories come whole. A longer one is cut into max_results/2 step buckets, and
    each gives its lowest and its highest value (a min/max envelope): a spike is never
    averaged away. Whole histories (and windows on block edges) read the MetricRollup
    blocks written with the points, so a million-point metric is ~4,000 rows read; other
    windows group the points themselves, over the (run, key, step) index.
    """
    if not isinstance(run_ids, list) or not run_ids or len(run_ids) > 100:
        raise invalid("Name 1 to 100 runs in 'run_ids'.")
    key = text(key, "metric_key", MAX_KEY_LENGTH)
    limit = integer(max_results, "max_results", default=1000, minimum=2)
    if limit > MAX_RESULTS_HISTORY:
        raise invalid(f"Invalid value for 'max_results': at most {MAX_RESULTS_HISTORY}.")
    start, end = integer(start_step, "start_step"), integer(end_step, "end_step")
    points = []
    for run_id in run_ids:
        run = get_run(caller, run_id)
        rows = Metric.objects.filter(run=run, key=key)
        if start is not None:
            rows = rows.filter(step__gte=start)
        if end is not None:
            rows = rows.filter(step__lte=end)
        buckets = max(limit // 2, 1)
        size = MetricRollup.ROLLUP_STEPS
        aligned = (start is None or start % size == 0) and (end is None or (end + 1) % size == 0)
        rolled = []
        if aligned:
            blocks = MetricRollup.objects.filter(run=run, key=key)
            if start is not None:
                blocks = blocks.filter(block__gte=start // size)
            if end is not None:
                blocks = blocks.filter(block__lte=(end + 1) // size - 1)
            rolled = list(
                blocks.order_by("block").values_list(
                    "low", "low_step", "high", "high_step", "timestamp", "count"
                )
            )
        if len(rolled) >= buckets and sum(r[5] for r in rolled) > limit:
            # A long history: merge its blocks into `buckets` groups (a few thousand rows
            # read, never the points), each drawn at its real lowest and highest step.
            per = -(-len(rolled) // buckets)
            for i in range(0, len(rolled), per):
                group = rolled[i : i + per]
                low = min(group, key=lambda r: r[0])
                high = max(group, key=lambda r: r[2])
                ts = max(r[4] for r in group)
                first, second = sorted([(low[1], low[0]), (high[3], high[2])])
                points.append((run.run_id, first[0], first[1], False, ts))
                if second != first:
                    points.append((run.run_id, second[0], second[1], False, ts))
            continue
        span = rows.aggregate(lo=Min("step"), hi=Max("step"), n=Count("pk"))
        if not span["n"]:
            if job_metrics.reads_from_job(run, key):
                points += job_metrics.executor_sampled(run, key, limit, start, end)
            continue
        if span["n"] <= limit:
            for step, value, nan, ts in rows.order_by("step", "timestamp").values_list(
                "step", "value", "is_nan", "timestamp"
            ):
                points.append((run.run_id, step, value, nan, ts))
            continue
        width = (span["hi"] - span["lo"]) // buckets + 1
        bucket = ExpressionWrapper(
            (F("step") - Value(span["lo"])) / Value(width), output_field=BigIntegerField()
        )
        grouped = (
            rows.filter(is_nan=False)
            .annotate(bucket=bucket)
            .values("bucket")
            .annotate(
                first=Min("step"),
                last=Max("step"),
                low=Min("value"),
                high=Max("value"),
                ts=Max("timestamp"),
            )
            .order_by("bucket")
        )
        for row in grouped:
            points.append((run.run_id, row["first"], row["low"], False, row["ts"]))
            if row["last"] != row["first"] or row["high"] != row["low"]:
                points.append((run.run_id, row["last"], row["high"], False, row["ts"]))
    return points
