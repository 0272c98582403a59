"""Jobs are runs, both ways: what a job reports with `executor.log_metric` shows in MLflow's
view of the job's run (get-run, search results, get-history and the charts' sampled read).

Those points live once, in the job's metric stream (jobs.MetricPoint), and are read from
there, not copied: MLflow calls made inside the job reach that stream too (the executor's
relay copies them), so a key the run has from MLflow is MLflow's, and only the other keys
come from the stream. MLflow has no workers: rank 0's points stand for the job. What
this does not give: `metrics.<key>` filters and order_by in the run search see MLflow's
keys only.
"""

from __future__ import annotations

from typing import NamedTuple

from django.db.models import Max

from jobs.models import MetricPoint
from tracking.models import LatestMetric, Run


class LatestRow(NamedTuple):
    """One key's latest value, shaped as load_runs' LatestMetric rows."""

    run_id: int
    key: str
    value: float
    is_nan: bool
    timestamp: int
    step: int


def _ms(ts) -> int:
    return int(ts.timestamp() * 1000)


def _stream(run: Run, key: str):
    return MetricPoint.objects.filter(job_id=run.job_id, worker=0, name=key)


def reads_from_job(run: Run, key: str) -> bool:
    """Whether `key` of this run is the job's executor metric (not an MLflow one)."""
    return bool(run.job_id) and not LatestMetric.objects.filter(run=run, key=key).exists()


def executor_history(run: Run, key: str, limit: int, offset: int):
    """get-history's rows (key, value, is_nan, timestamp, step) and the next offset."""
    rows = list(
        _stream(run, key)
        .order_by("step", "ts", "seq")
        .values_list("value", "step", "ts")[offset : offset + limit + 1]
    )
    history = [
        (key, 0.0 if value is None else value, value is None, _ms(ts), step or 0)
        for value, step, ts in rows[:limit]
    ]
    return history, (offset + limit if len(rows) > limit else None)


def executor_sampled(run: Run, key: str, limit: int, start, end) -> list[tuple]:
    """The charts' read (run_id, step, value, is_nan, timestamp): whole when short, else a
    min/max envelope over limit/2 buckets of points, as sampled_history draws MLflow's."""
    points = _stream(run, key).exclude(value=None)
    if start is not None:
        points = points.filter(step__gte=start)
    if end is not None:
        points = points.filter(step__lte=end)
    rows = [
        (step or 0, value, _ms(ts))
        for step, value, ts in points.order_by("step", "ts", "seq").values_list(
            "step", "value", "ts"
        )
    ]
    if len(rows) <= limit:
        return [(run.run_id, step, value, False, ts) for step, value, ts in rows]
    # One point kept for the history's last step, so the chart spans the whole run.
    buckets = max((limit - 1) // 2, 1)
    per = -(-len(rows) // buckets)
    kept = set()
    for i in range(0, len(rows), per):
        group = rows[i : i + per]
        low, high = min(group, key=lambda r: r[1]), max(group, key=lambda r: r[1])
        # A flat bucket draws at its ends rather than twice at one point.
        kept |= {low, high} if low != high else {group[0], group[-1]}
    kept.add(rows[-1])
    return [(run.run_id, step, value, False, ts) for step, value, ts in sorted(kept)]


def executor_latest(runs: list[Run], mlflow_keys: dict[int, set[str]]) -> dict[int, list]:
    """Each job run's latest executor value per key (the last one reported), keys the run
    has from MLflow left out: two queries for a page of runs, none without jobs."""
    run_of_job = {run.job_id: run.pk for run in runs if run.job_id}
    if not run_of_job:
        return {}
    last = (
        MetricPoint.objects.filter(job_id__in=run_of_job, worker=0)
        .values("job_id", "name")
        .annotate(last=Max("seq"))
    )
    wanted = {
        (row["job_id"], row["last"])
        for row in last
        if row["name"] not in mlflow_keys.get(run_of_job[row["job_id"]], set())
    }
    found: dict[int, list] = {}
    if not wanted:
        return found
    points = MetricPoint.objects.filter(
        job_id__in={job for job, _ in wanted}, worker=0, seq__in={seq for _, seq in wanted}
    ).order_by("name")
    for job_id, seq, name, value, step, ts in points.values_list(
        "job_id", "seq", "name", "value", "step", "ts"
    ):
        if (job_id, seq) in wanted:
            run_pk = run_of_job[job_id]
            found.setdefault(run_pk, []).append(
                LatestRow(
                    run_pk, name, 0.0 if value is None else value, value is None, _ms(ts), step or 0
                )
            )
    return found
