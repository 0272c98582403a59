"""Experiments and runs as pages: a project's experiments, an experiment's runs table,
runs side by side, and a run. What the MLflow API shows (tracking/api/), for people;
runs logged from jobs and from anywhere else alike."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import Count, F, Max, Q
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render

from core.views import GantryView
from modelhub.models import ModelVersion
from projects.models import Project
from projects.permissions import get_object_for_user
from tracking.charts import chart_series
from tracking.models import Experiment, Lifecycle, Run
from tracking.run_table import STATUS_BADGES, RunTable, ms_datetime
from tracking.services.runs import load_runs

COMPARE_MAX_RUNS = 10
MAX_CHARTS = 12


def _experiment(request, pk) -> Experiment:
    return get_object_for_user(
        request.user,
        Experiment.objects.select_related("project__tenant"),
        "experiment.view",
        pk=pk,
    )


class ExperimentListView(GantryView):
    """A project's experiments, the most recently run first."""

    model = Project
    permission_action = "experiment.view"

    def get(self, request, pk):
        project = self.get_object()
        active = Q(runs__lifecycle_stage=Lifecycle.ACTIVE)
        experiments = (
            Experiment.objects.filter(project=project, lifecycle_stage=Lifecycle.ACTIVE)
            .annotate(run_count=Count("runs", filter=active))
            .annotate(last_run=Max("runs__start_time", filter=active))
            .order_by(F("last_run").desc(nulls_last=True), "name")
        )
        page = Paginator(experiments, 50).get_page(request.GET.get("page"))
        for experiment in page.object_list:
            experiment.last_run_at = ms_datetime(experiment.last_run)
        return render(
            request,
            "tracking/experiment_list.html",
            {"object": project, "project": project, "page": page},
        )


class ExperimentDetailView(GantryView):
    """An experiment's runs: parameters and metrics as columns, filtered and sorted.

    `?run=<run id>` goes on to that run's page: MLflow's client prints its runs as
    `<tracking URI>/#/experiments/<id>/runs/<run id>`, and the home page sends such a
    link here (static/gantry/gantry.js)."""

    model = Experiment
    permission_action = "experiment.view"

    def get(self, request, pk):
        experiment = _experiment(request, pk)
        run_id = request.GET.get("run")
        if run_id:
            run = Run.objects.filter(experiment=experiment, run_id=run_id[:64]).first()
            if run is None:
                raise Http404
            return redirect(run)
        table = RunTable(experiment, request.GET)
        return render(
            request,
            "tracking/experiment_detail.html",
            {
                "object": experiment,
                "project": experiment.project,
                "table": table,
                "page": table.page,
                "states": STATUS_BADGES,
                "compare_max": COMPARE_MAX_RUNS,
            },
            status=400 if table.error else 200,
        )


def _chart_data(runs: list[Run], keys: list[str]) -> list[dict]:
    series = chart_series(runs, keys)
    return [
        {
            "key": key,
            "series": [
                {"label": run.name or run.run_id[:8], "points": series[key][run.pk]}
                for run in runs
                if series.get(key, {}).get(run.pk)
            ],
        }
        for key in keys
        if series.get(key)
    ]


class RunCompareView(GantryView):
    """Ticked runs side by side: their parameters (the differing ones first) and their
    metrics, one chart a metric with a line a run (`?run=<id>&run=<id>`)."""

    model = Experiment
    permission_action = "experiment.view"

    def get(self, request, pk):
        experiment = _experiment(request, pk)
        picked = list(dict.fromkeys(v[:64] for v in request.GET.getlist("run") if v))
        if len(picked) > COMPARE_MAX_RUNS:
            return HttpResponseBadRequest(f"Compare at most {COMPARE_MAX_RUNS} runs.")
        found = dict(
            Run.objects.filter(experiment=experiment, run_id__in=picked).values_list("run_id", "pk")
        )
        runs = load_runs([found[r] for r in picked if r in found])
        params = {run.pk: {p.key: p.value for p in run.loaded["params"]} for run in runs}
        latest = {run.pk: {m.key: m for m in run.loaded["latest"]} for run in runs}
        param_rows = [
            {"key": key, "values": values, "same": len(set(values)) == 1}
            for key in sorted({k for p in params.values() for k in p})
            for values in [[params[run.pk].get(key) for run in runs]]
        ]
        param_rows.sort(key=lambda row: row["same"])  # the differences first
        metric_keys = sorted({k for m in latest.values() for k in m})
        metric_rows = [
            {"key": key, "values": [latest[run.pk].get(key) for run in runs]} for key in metric_keys
        ]
        return render(
            request,
            "tracking/run_compare.html",
            {
                "object": experiment,
                "project": experiment.project,
                "runs": runs,
                "missing": [r for r in picked if r not in found],
                "param_rows": param_rows,
                "metric_rows": metric_rows,
                "charts": _chart_data(runs, metric_keys[:MAX_CHARTS]),
                "more_metrics": max(len(metric_keys) - MAX_CHARTS, 0),
            },
        )


class RunDetailView(GantryView):
    """A run: its charts first, its parameters and tags beside, its job and the model
    versions registered from it."""

    model = Run
    permission_action = "experiment.view"

    def get(self, request, pk):
        run = get_object_for_user(
            request.user,
            Run.objects.select_related("experiment__project__tenant", "job"),
            "experiment.view",
            pk=pk,
        )
        run.loaded = load_runs([run.pk])[0].loaded
        keys = sorted({m.key for m in run.loaded["latest"]})
        project = run.experiment.project
        versions = ModelVersion.objects.filter(model__project=project).filter(
            Q(mlflow_source__run_id=run.run_id) | Q(source_job_id=run.job_id)
            if run.job_id
            else Q(mlflow_source__run_id=run.run_id)
        )
        return render(
            request,
            "tracking/run_detail.html",
            {
                "object": run,
                "project": project,
                "experiment": run.experiment,
                "badge": STATUS_BADGES.get(run.status, "text-bg-secondary"),
                "started": ms_datetime(run.start_time),
                "ended": ms_datetime(run.end_time),
                "duration_s": (run.end_time - run.start_time) / 1000
                if run.end_time and run.start_time
                else None,
                "params": sorted(run.loaded["params"]),
                "tags": sorted(t for t in run.loaded["tags"] if not t.key.startswith("mlflow.")),
                "metrics": sorted(run.loaded["latest"], key=lambda m: m.key),
                "charts": _chart_data([run], keys[:MAX_CHARTS]),
                "more_metrics": max(len(keys) - MAX_CHARTS, 0),
                "versions": versions.select_related("model").order_by("model__name", "number"),
                "logged_models": run.loaded["outputs"],
            },
        )
