"""Runs: create, update, delete and restore, log-batch (and what log-metric,
log-parameter and set-tag come down to), tags, inputs, search, and loading runs with
their data."""

from __future__ import annotations

import secrets
from collections import defaultdict

from django.db import transaction

from tracking import search
from tracking.errors import invalid, not_found
from tracking.models import (
    LatestMetric,
    Lifecycle,
    LoggedModel,
    Param,
    Run,
    RunInput,
    RunStatus,
    RunTag,
    now_ms,
)
from tracking.services import job_metrics
from tracking.services.access import Caller, get_experiment, get_run
from tracking.services.metrics import metric_point, store_metrics
from tracking.services.validation import integer, listed, param_pair, shown, tag_pair, text

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_ENTITIES_PER_BATCH = 1000
MAX_RESULTS_RUNS = 50000
RUN_NAME_TAG = "mlflow.runName"


def _active(run: Run) -> Run:
    if run.lifecycle_stage != Lifecycle.ACTIVE:
        raise invalid(
            f"The run {run.run_id} must be in the 'active' state. "
            f"Current state is {run.lifecycle_stage}."
        )
    return run


def _run_name() -> str:
    return f"run-{secrets.token_hex(3)}"


def create_run(caller: Caller, experiment_id, start_time=None, tags=None, run_name=None) -> Run:
    experiment = get_experiment(caller, experiment_id, "experiment.log")
    if experiment.lifecycle_stage != Lifecycle.ACTIVE:
        raise invalid(f"The experiment {experiment.pk} must be in the 'active' state.")
    pairs = dict(tag_pair(t) for t in listed(tags, "tags"))
    name = text(run_name, "run_name", 250, required=False) or pairs.get(RUN_NAME_TAG) or _run_name()
    pairs[RUN_NAME_TAG] = name
    with transaction.atomic():
        run = Run.objects.create(
            experiment=experiment,
            name=name,
            user_id=caller.user.get_username(),
            created_by=caller.user,
            start_time=integer(start_time, "start_time", default=now_ms()),
            job=None,
        )
        RunTag.objects.bulk_create(RunTag(run=run, key=k, value=v) for k, v in pairs.items())
    run.experiment = experiment
    return run


def update_run(caller: Caller, run_id, status=None, end_time=None, run_name=None) -> Run:
    run = _active(get_run(caller, run_id, "experiment.log"))
    fields = {}
    if status:
        if status not in RunStatus.values:
            raise invalid(f"Invalid run status '{status}': one of {RunStatus.values}.")
        fields["status"] = status
    if end_time not in (None, ""):
        fields["end_time"] = integer(end_time, "end_time")
    if run_name:
        fields["name"] = text(run_name, "run_name", 250)
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(**fields)
        if "name" in fields:
            RunTag.objects.update_or_create(
                run=run, key=RUN_NAME_TAG, defaults={"value": fields["name"]}
            )
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def set_run_lifecycle(caller: Caller, run_id, deleted: bool) -> None:
    run = get_run(caller, run_id, "experiment.log")
    Run.objects.filter(pk=run.pk).update(
        lifecycle_stage=Lifecycle.DELETED if deleted else Lifecycle.ACTIVE,
        deleted_time=now_ms() if deleted else None,
    )


def log_batch(caller: Caller, run_id, metrics=None, params=None, tags=None) -> Run:
    """MLflow's LogBatch, and what log-metric, log-parameter and set-tag come down to."""
    metrics, params, tags = metrics or [], params or [], tags or []
    for what, value in (("metrics", metrics), ("params", params), ("tags", tags)):
        if not isinstance(value, list):
            raise invalid(f"Invalid value {shown(value)} for parameter '{what}' supplied.")
    for item in metrics:
        if isinstance(item, dict) and item.get("timestamp") in (None, ""):
            raise invalid(
                f"Invalid value {shown(metrics)[:1000]} for parameter 'metrics' supplied."
            )
    if len(metrics) > MAX_METRICS_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_METRICS_PER_BATCH} metrics. "
            f"Got {len(metrics)} metrics."
        )
    if len(params) > MAX_PARAMS_TAGS_PER_BATCH or len(tags) > MAX_PARAMS_TAGS_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_PARAMS_TAGS_PER_BATCH} params "
            f"and {MAX_PARAMS_TAGS_PER_BATCH} tags. Got {len(params)} params and {len(tags)} tags."
        )
    if len(metrics) + len(params) + len(tags) > MAX_ENTITIES_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_ENTITIES_PER_BATCH} entities."
        )
    points = [metric_point(m) for m in metrics]
    param_pairs = [param_pair(p) for p in params]
    seen: dict[str, str] = {}
    for key, value in param_pairs:
        if seen.setdefault(key, value) != value:
            raise invalid(f"Duplicate parameter keys have been submitted: '{key}' with two values.")
    tag_pairs = dict(tag_pair(t) for t in tags)
    run = _active(get_run(caller, run_id, "experiment.log"))
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).values_list("pk").get()
        if seen:
            existing = dict(Param.objects.filter(run=run, key__in=seen).values_list("key", "value"))
            for key, value in seen.items():
                if key in existing and existing[key] != value:
                    raise invalid(
                        f"Changing param values is not allowed. Param with key='{key}' was "
                        f"already logged with value='{existing[key]}' for run ID='{run.run_id}'. "
                        f"Attempted logging new value '{value}'."
                    )
            Param.objects.bulk_create(
                Param(run=run, key=k, value=v) for k, v in seen.items() if k not in existing
            )
        if tag_pairs:
            _set_tags(run, tag_pairs)
        if points:
            store_metrics(run, points)
    return run


def _set_tags(run: Run, pairs: dict[str, str]) -> None:
    existing = {t.key: t for t in RunTag.objects.filter(run=run, key__in=pairs)}
    changed = []
    for key, value in pairs.items():
        if key in existing:
            existing[key].value = value
            changed.append(existing[key])
    RunTag.objects.bulk_update(changed, ["value"])
    RunTag.objects.bulk_create(
        RunTag(run=run, key=k, value=v) for k, v in pairs.items() if k not in existing
    )
    if RUN_NAME_TAG in pairs:
        Run.objects.filter(pk=run.pk).update(name=pairs[RUN_NAME_TAG][:250])


def delete_tag(caller: Caller, run_id, key) -> None:
    run = _active(get_run(caller, run_id, "experiment.log"))
    if not RunTag.objects.filter(run=run, key=key).delete()[0]:
        raise not_found(f"No tag with name: {key} in run with id {run.run_id}")


def log_inputs(caller: Caller, run_id, datasets) -> None:
    run = _active(get_run(caller, run_id, "experiment.log"))
    if not isinstance(datasets, list):
        raise invalid("datasets is a list.")
    rows = []
    for item in datasets:
        dataset = item.get("dataset") if isinstance(item, dict) else None
        if not isinstance(dataset, dict) or not isinstance(dataset.get("name"), str):
            raise invalid("Every dataset input has a dataset with a name.")
        rows.append(
            RunInput(
                run=run,
                dataset=dataset,
                tags=item.get("tags") or [],
                name=text(dataset["name"], "dataset.name", 500),
                digest=text(dataset.get("digest", ""), "dataset.digest", 64, required=False),
            )
        )
    RunInput.objects.bulk_create(rows, ignore_conflicts=True)


def search_runs(
    caller: Caller, experiment_ids, filter_string, run_view_type, max_results, order_by, offset
):
    if not isinstance(experiment_ids, list) or not experiment_ids:
        experiment_ids = ["0"] if not experiment_ids else [experiment_ids]
    experiments = [get_experiment(caller, e).pk for e in experiment_ids]
    limit = integer(max_results, "max_results", default=1000, minimum=1)
    if limit > MAX_RESULTS_RUNS:
        raise invalid(
            f"Invalid value {limit} for parameter 'max_results' supplied. "
            f"It must be at most {MAX_RESULTS_RUNS}."
        )
    runs = Run.objects.filter(experiment_id__in=experiments)
    runs = search.apply_view_type(runs, run_view_type)
    joins: dict = {}  # the filter's joins, which the order reuses
    runs = search.apply_filter(runs, search.parse_filter(filter_string), joins)
    runs = search.apply_order(
        runs, order_by if isinstance(order_by, list) else [order_by] if order_by else [], joins
    )
    page = list(runs.values_list("pk", flat=True)[offset : offset + limit + 1])
    return load_runs(page[:limit]), (offset + limit if len(page) > limit else None)


def load_runs(pks: list[int]) -> list[Run]:
    """Runs with their data, in the given order, in six queries whatever their number.

    A run's metrics, params, tags and inputs come as named rows, not model instances:
    building ~400 instances was most of a 100-run search's time (10 of 15 ms)."""
    runs = {r.pk: r for r in Run.objects.filter(pk__in=pks).select_related("experiment")}
    children = defaultdict(lambda: defaultdict(list))
    for model, name, fields in (
        (LatestMetric, "latest", ("key", "value", "is_nan", "timestamp", "step")),
        (Param, "params", ("key", "value")),
        (RunTag, "tags", ("key", "value")),
        (RunInput, "inputs", ("dataset", "tags")),
    ):
        rows = model.objects.filter(run_id__in=pks).order_by("pk")
        for row in rows.values_list("run_id", *fields, named=True):
            children[row.run_id][name].append(row)
    # The run's outputs: the MLflow 3 models it logged (log_model's log-outputs call).
    for run_pk, model_id in (
        LoggedModel.objects.filter(run_id__in=pks).order_by("pk").values_list("run_id", "model_id")
    ):
        children[run_pk]["outputs"].append(model_id)
    # A job's run also shows what its executor reported (executor.log_metric).
    mlflow_keys = {pk: {m.key for m in children[pk]["latest"]} for pk in pks}
    for pk, rows in job_metrics.executor_latest(list(runs.values()), mlflow_keys).items():
        children[pk]["latest"].extend(rows)
    ordered = []
    for pk in pks:
        run = runs[pk]
        run.loaded = children[pk]
        ordered.append(run)
    return ordered
