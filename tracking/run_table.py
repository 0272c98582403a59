"""An experiment's runs as a table: parameters and metrics as columns, filtered with the
API's own search grammar (tracking.search: `metrics.acc > 0.9 and params.lr = '0.01'`),
sorted by any column, a page at a time, in a fixed number of queries.

A metric column shows the run's last value and its best (the lowest for a key that
reads as a loss or an error, the highest otherwise), the best read from the
MetricRollup blocks rather than the points.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core.paginator import Paginator
from django.db.models import Max, Min

from tracking import search
from tracking.errors import MlflowError
from tracking.models import Experiment, LatestMetric, Lifecycle, MetricRollup, Param, Run, RunStatus
from tracking.services.runs import load_runs

MAX_COLUMNS = 30
PAGE_SIZE = 50
LOWER_IS_BETTER = re.compile(r"loss|err|mse|mae|rmse|perplexity|wer|cer|time|latency", re.I)
STATUS_BADGES = {
    RunStatus.RUNNING: "text-bg-primary",
    RunStatus.SCHEDULED: "text-bg-secondary",
    RunStatus.FINISHED: "text-bg-success",
    RunStatus.FAILED: "text-bg-danger",
    RunStatus.KILLED: "text-bg-warning",
}
ATTRIBUTE_COLUMNS = [
    ("attributes.run_name", "Run"),
    ("attributes.status", "State"),
    ("attributes.start_time", "Started"),
    ("attributes.user_id", "By"),
]


def lower_is_better(key: str) -> bool:
    return bool(LOWER_IS_BETTER.search(key))


def ms_datetime(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms else None


@dataclass
class Column:
    """A sortable column: `order` is its MLflow order_by identifier."""

    order: str
    label: str
    kind: str = "attribute"
    sorted: str = ""
    link: str = ""


@dataclass
class RunRow:
    run: Run
    params: list = field(default_factory=list)
    metrics: list = field(default_factory=list)  # (last, best) per metric column

    @property
    def started(self):
        return ms_datetime(self.run.start_time)

    @property
    def duration_s(self):
        end = self.run.end_time
        return (end - self.run.start_time) / 1000 if end and self.run.start_time else None

    @property
    def badge(self):
        return STATUS_BADGES.get(self.run.status, "text-bg-secondary")


class RunTable:
    """One page of an experiment's runs, as the request's `filter`, `state`, `order` and
    `page` ask. A filter that does not parse is reported in `error` and not applied."""

    def __init__(self, experiment: Experiment, query):
        self.experiment = experiment
        self.filter = (query.get("filter") or "").strip()
        self.state = query.get("state") or ""
        self.order = (query.get("order") or "").strip()
        self.error = ""
        runs = Run.objects.filter(experiment=experiment, lifecycle_stage=Lifecycle.ACTIVE)
        keys = self._keys(runs)
        if self.state in RunStatus.values:
            runs = runs.filter(status=self.state)
        else:
            self.state = ""
        try:
            joins: dict = {}
            filtered = search.apply_filter(runs, search.parse_filter(self.filter), joins)
            ordered = search.apply_order(filtered, [self.order] if self.order else [], joins)
        except MlflowError as exc:
            self.error = exc.message
            ordered = search.apply_order(runs, [])
        self.page = Paginator(ordered.values_list("pk", flat=True), PAGE_SIZE).get_page(
            query.get("page")
        )
        loaded = load_runs(list(self.page.object_list))
        self.param_keys, self.metric_keys = keys
        for run in loaded:  # a job's executor metrics are columns too
            for row in run.loaded["latest"]:
                if row.key not in self.metric_keys and len(self.metric_keys) < MAX_COLUMNS:
                    self.metric_keys.append(row.key)
        self.rows = self._rows(loaded)

    @staticmethod
    def _keys(runs) -> tuple[list[str], list[str]]:
        params = Param.objects.filter(run__in=runs).values_list("key", flat=True)
        metrics = LatestMetric.objects.filter(run__in=runs).values_list("key", flat=True)
        return (
            list(params.distinct().order_by("key")[:MAX_COLUMNS]),
            list(metrics.distinct().order_by("key")[:MAX_COLUMNS]),
        )

    def _rows(self, runs: list[Run]) -> list[RunRow]:
        best = {}
        extremes = (
            MetricRollup.objects.filter(run__in=[r.pk for r in runs], key__in=self.metric_keys)
            .values("run_id", "key")
            .annotate(low=Min("low"), high=Max("high"))
        )
        for row in extremes:
            pick = "low" if lower_is_better(row["key"]) else "high"
            best[(row["run_id"], row["key"])] = row[pick]
        rows = []
        for run in runs:
            params = {p.key: p.value for p in run.loaded["params"]}
            last = {m.key: (None if m.is_nan else m.value) for m in run.loaded["latest"]}
            rows.append(
                RunRow(
                    run,
                    [params.get(k) for k in self.param_keys],
                    [(last.get(k), best.get((run.pk, k))) for k in self.metric_keys],
                )
            )
        return rows

    @property
    def columns(self) -> list[Column]:
        """Every column with the `order` its header link sets (descending first, then
        ascending) and how the table is sorted by it now."""
        columns = (
            [Column(order, label) for order, label in ATTRIBUTE_COLUMNS]
            + [Column(f"params.`{k}`", k, "param") for k in self.param_keys]
            + [Column(f"metrics.`{k}`", k, "metric") for k in self.metric_keys]
        )
        for column in columns:
            if self.order == f"{column.order} DESC":
                column.sorted, column.link = "desc", f"{column.order} ASC"
            else:
                column.sorted = "asc" if self.order in (column.order, f"{column.order} ASC") else ""
                column.link = f"{column.order} DESC"
        return columns
