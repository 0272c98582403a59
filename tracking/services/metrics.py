"""Every change the MLflow API makes, as plain functions (STYLE: services).

Each takes the `Caller` (user and the token the request came with) first, checks the
permission matrix (`experiment.view`, `experiment.log`, `experiment.delete`), validates
as MLflow's server does, and raises `MlflowError` with MLflow's codes. Something the
caller may not see answers RESOURCE_DOES_NOT_EXIST, like something that does not exist.
"""

from __future__ import annotations

import json
import math
import secrets
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Max, Min, Value

from projects.models import Project
from projects.permissions import can, visible_project_ids
from tracking import search
from tracking.errors import MlflowError, invalid, not_found
from tracking.models import (
    Experiment,
    ExperimentTag,
    LatestMetric,
    Lifecycle,
    LoggedModel,
    Metric,
    MetricRollup,
    Param,
    Run,
    RunInput,
    RunStatus,
    RunTag,
    now_ms,
)

DEFAULT_EXPERIMENT = "Default"
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_ENTITIES_PER_BATCH = 1000
MAX_KEY_LENGTH = 250
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_RESULTS_RUNS = 50000
MAX_RESULTS_HISTORY = 25000
RUN_NAME_TAG = "mlflow.runName"


@dataclass
class Caller:
    """Who calls: a user, and the API token (None for a browser session) that narrows
    what they reach. A job's tracking token stands as a write token limited to the
    job's project (tracking.jobenv)."""

    user: object
    token: object = None
    job: object = None

    def can(self, action: str, obj) -> bool:
        return can(self.user, action, obj, token=self.token)

    @property
    def project_id(self) -> int | None:
        return getattr(self.token, "project_id", None)


# --- reading with access ------------------------------------------------------------------


def _project_of_caller(caller: Caller, purpose: str) -> Project:
    """The one project a bare name or experiment "0" means: the token's, or the user's
    only visible one."""
    if caller.project_id is not None:
        return Project.objects.select_related("tenant").get(pk=caller.project_id)
    ids = (
        list(Project.objects.values_list("pk", flat=True)[:2])
        if caller.user.is_superuser
        else visible_project_ids(caller.user)
    )
    if len(ids) == 1:
        return Project.objects.select_related("tenant").get(pk=ids[0])
    raise MlflowError(
        f"{purpose} names no project, and you have {'none' if not ids else 'several'}: "
        "use a token limited to one project, or name the experiment 'tenant/project/name'.",
        "RESOURCE_DOES_NOT_EXIST" if not ids else "INVALID_PARAMETER_VALUE",
    )


def _split_name(caller: Caller, name: str) -> tuple[Project | None, str]:
    """`tenant/project/name` names its project; a bare name means the caller's project."""
    parts = name.split("/", 2)
    if len(parts) == 3 and parts[2]:
        project = (
            Project.objects.visible_to(caller.user)
            .select_related("tenant")
            .filter(tenant__slug=parts[0], slug=parts[1])
            .first()
        )
        if project is not None:
            return project, parts[2]
    return None, name


def default_experiment(project: Project) -> Experiment:
    experiment = Experiment.objects.filter(project=project, is_default=True).first()
    if experiment is None:
        try:
            with transaction.atomic():
                experiment = Experiment.objects.create(
                    project=project, name=DEFAULT_EXPERIMENT, is_default=True
                )
        except IntegrityError:  # created meanwhile (or a user's experiment has the name)
            experiment = Experiment.objects.filter(project=project, is_default=True).first()
            if experiment is None:
                raise invalid(
                    f"The project's experiment '{DEFAULT_EXPERIMENT}' is not its default."
                ) from None
    return experiment


def _visible(caller: Caller, queryset, action: str, obj_name: str, ident: str):
    obj = queryset.first()
    if obj is None or not caller.can("experiment.view", obj):
        raise not_found(f"{obj_name} '{ident}' does not exist.")
    if not caller.can(action, obj):
        raise MlflowError(
            f"You may not {action.split('.')[1]} in {obj_name.lower()} '{ident}'.",
            "PERMISSION_DENIED",
        )
    return obj


def get_experiment(caller: Caller, experiment_id, action: str = "experiment.view") -> Experiment:
    ident = str(experiment_id if experiment_id is not None else "")
    if ident in ("0", ""):
        experiment = default_experiment(_project_of_caller(caller, "Experiment '0'"))
        return _visible(
            caller,
            Experiment.objects.filter(pk=experiment.pk).select_related("project__tenant"),
            action,
            "Experiment",
            ident,
        )
    if not ident.isdigit() or len(ident) > 18:
        raise not_found(f"Experiment '{ident}' does not exist.")
    queryset = Experiment.objects.visible_to(caller.user).select_related("project__tenant")
    return _visible(caller, queryset.filter(pk=int(ident)), action, "Experiment", ident)


def get_experiment_by_name(caller: Caller, name: str) -> Experiment:
    if not isinstance(name, str) or not name:
        raise invalid("Missing value for required parameter 'experiment_name'.")
    project, bare = _split_name(caller, name)
    queryset = Experiment.objects.visible_to(caller.user).select_related("project__tenant")
    if project is not None:
        queryset = queryset.filter(project=project, name=bare)
    elif caller.project_id is not None:
        queryset = queryset.filter(project_id=caller.project_id, name=bare)
    else:
        found = list(queryset.filter(name=bare)[:2])
        if len(found) > 1:
            raise invalid(
                f"Several of your projects have an experiment '{name}': "
                "name it 'tenant/project/name'."
            )
    return _visible(caller, queryset, "experiment.view", "Experiment", name)


def get_run(caller: Caller, run_id, action: str = "experiment.view") -> Run:
    run_id = _text(run_id, "run_id", 64)
    queryset = Run.objects.visible_to(caller.user).select_related("experiment__project__tenant")
    run = queryset.filter(run_id=run_id).first()
    if run is None or not caller.can("experiment.view", run):
        raise not_found(f"Run with id={run_id} not found")
    run = _visible(
        caller,
        Run.objects.filter(pk=run.pk).select_related("experiment__project__tenant"),
        action,
        "Run",
        run_id,
    )
    if (
        action != "experiment.view"
        and caller.job is not None
        and run.job_id not in (None, caller.job.pk)
    ):
        raise MlflowError(
            f"A job's token logs only to its own run, not to '{run_id}'.", "PERMISSION_DENIED"
        )
    return run


def _active(run: Run) -> Run:
    if run.lifecycle_stage != Lifecycle.ACTIVE:
        raise invalid(
            f"The run {run.run_id} must be in the 'active' state. "
            f"Current state is {run.lifecycle_stage}."
        )
    return run


# --- validation -----------------------------------------------------------------------------


def _shown(value) -> str:
    """A value as MLflow's messages show it (JSON, compact)."""
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _text(value, what: str, limit: int, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if value is None or (required and value == ""):
        raise invalid(f"Missing value for required parameter '{what}'.")
    if not isinstance(value, str):
        raise invalid(f"Invalid value {_shown(value)} for parameter '{what}' supplied.")
    if "\x00" in value:
        raise invalid(f"Invalid value for '{what}': NUL characters are not allowed.")
    if len(value) > limit:
        raise invalid(f"'{what}' exceeds the maximum length of {limit} characters.")
    return value


def _items(value, what: str) -> list:
    """A list field (tags, datasets…): absent is empty, anything else but a list refused."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(f"Invalid value {_shown(value)[:200]} for parameter '{what}' supplied.")
    return value


def _key(value, what: str) -> str:
    key = _text(value, what, MAX_KEY_LENGTH)
    if key.startswith("/") or ".." in key.split("/"):
        raise invalid(f"Invalid value '{key}' for parameter '{what}': names may not be paths out.")
    return key


def _int(value, what: str, default=None, minimum=None) -> int | None:
    if value is None or value == "":
        return default
    try:
        number = int(value)
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise invalid(f"Invalid value {_shown(value)} for parameter '{what}' supplied.") from None
    if abs(number) >= 2**63 or (minimum is not None and number < minimum):
        raise invalid(f"Invalid value {_shown(value)} for parameter '{what}' supplied.")
    return number


class Point(NamedTuple):
    """A metric value on its way in (no model instance: 1,000 of them per batch)."""

    key: str
    value: float
    is_nan: bool
    timestamp: int
    step: int


def _metric(item) -> Point:
    if not isinstance(item, dict):
        raise invalid("Every metric is an object with key, value, timestamp and step.")
    key = _key(item.get("key"), "key")
    value = item.get("value")
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        value = float(value.replace("Infinity", "inf"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"Got invalid value {value!r} for metric '{key}': a number.")
    value = float(value)
    timestamp = _int(item.get("timestamp"), "timestamp")
    if timestamp is None:
        raise invalid(f"Missing value for required parameter 'timestamp' of metric '{key}'.")

    step = _int(item.get("step"), "step", default=0)
    nan = math.isnan(value)
    return Point(key, 0.0 if nan else value, nan, timestamp, step)


def _param(item) -> tuple[str, str]:
    if not isinstance(item, dict):
        raise invalid("Every param is an object with key and value.")
    key = _key(item.get("key"), "key")
    value = item.get("value")
    value = "" if value is None else value
    return key, _text(
        str(value) if isinstance(value, int | float) else value,
        "value",
        MAX_PARAM_VALUE_LENGTH,
        required=False,
    )


def _tag(item) -> tuple[str, str]:
    if not isinstance(item, dict):
        raise invalid("Every tag is an object with key and value.")
    key = _key(item.get("key"), "key")
    return key, _text(item.get("value", ""), "value", MAX_TAG_VALUE_LENGTH, required=False)


# --- experiments ----------------------------------------------------------------------------


def create_experiment(caller: Caller, name, tags=None) -> Experiment:
    name = _text(name, "name", 500)
    project, bare = _split_name(caller, name)
    if project is None:
        project = _project_of_caller(caller, f"Experiment '{name}'")
    if not caller.can("experiment.view", project):
        raise not_found(f"The project of experiment '{name}' does not exist.")
    if not caller.can("experiment.log", project):
        raise MlflowError("You may not create experiments in this project.", "PERMISSION_DENIED")
    pairs = [_tag(t) for t in _items(tags, "tags")]
    try:
        with transaction.atomic():
            experiment = Experiment.objects.create(
                project=project, name=bare, created_by=caller.user
            )
            ExperimentTag.objects.bulk_create(
                ExperimentTag(experiment=experiment, key=k, value=v) for k, v in dict(pairs).items()
            )
    except IntegrityError:
        raise MlflowError(
            f"Experiment '{name}' already exists.", "RESOURCE_ALREADY_EXISTS"
        ) from None
    experiment.project = project
    return experiment


def rename_experiment(caller: Caller, experiment_id, new_name) -> Experiment:
    experiment = get_experiment(caller, experiment_id, "experiment.log")
    new_name = _text(new_name, "new_name", 500)
    project, bare = _split_name(caller, new_name)
    if project is not None and project.pk != experiment.project_id:
        raise invalid("An experiment stays in its project: rename it within it.")
    if experiment.lifecycle_stage != Lifecycle.ACTIVE:
        raise invalid("Cannot rename a non-active experiment.")
    try:
        with transaction.atomic():
            Experiment.objects.filter(pk=experiment.pk).update(name=bare, last_update_time=now_ms())
    except IntegrityError:
        raise MlflowError(
            f"Experiment '{new_name}' already exists.", "RESOURCE_ALREADY_EXISTS"
        ) from None
    experiment.name = bare
    return experiment


def set_experiment_lifecycle(caller: Caller, experiment_id, deleted: bool) -> None:
    experiment = get_experiment(caller, experiment_id, "experiment.delete")
    if experiment.is_default and deleted:
        raise invalid("The project's default experiment cannot be deleted.")
    stage = Lifecycle.DELETED if deleted else Lifecycle.ACTIVE
    with transaction.atomic():
        Experiment.objects.filter(pk=experiment.pk).update(
            lifecycle_stage=stage, last_update_time=now_ms()
        )
        Run.objects.filter(experiment=experiment).update(
            lifecycle_stage=stage, deleted_time=now_ms() if deleted else None
        )


def set_experiment_tag(caller: Caller, experiment_id, key, value) -> None:
    experiment = get_experiment(caller, experiment_id, "experiment.log")
    key, value = _tag({"key": key, "value": value})
    ExperimentTag.objects.update_or_create(
        experiment=experiment, key=key, defaults={"value": value}
    )


def delete_experiment_tag(caller: Caller, experiment_id, key) -> None:
    experiment = get_experiment(caller, experiment_id, "experiment.log")
    if not ExperimentTag.objects.filter(experiment=experiment, key=key).delete()[0]:
        raise not_found(f"No tag with name: {key} in experiment {experiment.pk}.")


def search_experiments(caller: Caller, view_type, max_results, filter_string, order_by, offset):
    queryset = Experiment.objects.visible_to(caller.user).select_related("project__tenant")
    if caller.project_id is not None:
        queryset = queryset.filter(project_id=caller.project_id)
    queryset = _view_type(queryset, view_type)
    queryset = search.apply_experiment_filter(
        queryset, search.parse_filter(filter_string, experiments=True)
    )
    queryset = search.apply_experiment_order(queryset, order_by)
    limit = _int(max_results, "max_results", default=1000, minimum=1)
    if limit > 50000:
        raise invalid("Invalid value for max_results: at most 50000.")
    page = list(queryset.prefetch_related("tags")[offset : offset + limit + 1])
    return page[:limit], (offset + limit if len(page) > limit else None)


def _view_type(queryset, view_type):
    view_type = view_type or "ACTIVE_ONLY"
    if view_type == "ACTIVE_ONLY":
        return queryset.filter(lifecycle_stage=Lifecycle.ACTIVE)
    if view_type == "DELETED_ONLY":
        return queryset.filter(lifecycle_stage=Lifecycle.DELETED)
    if view_type == "ALL":
        return queryset
    raise invalid(f"Invalid view type '{view_type}': ACTIVE_ONLY, DELETED_ONLY or ALL.")


# --- runs -----------------------------------------------------------------------------------


def _run_name() -> str:
    return f"run-{secrets.token_hex(3)}"


def create_run(caller: Caller, experiment_id, start_time=None, tags=None, run_name=None) -> Run:
    experiment = get_experiment(caller, experiment_id, "experiment.log")
    if experiment.lifecycle_stage != Lifecycle.ACTIVE:
        raise invalid(f"The experiment {experiment.pk} must be in the 'active' state.")
    pairs = dict(_tag(t) for t in _items(tags, "tags"))
    name = (
        _text(run_name, "run_name", 250, required=False) or pairs.get(RUN_NAME_TAG) or _run_name()
    )
    pairs[RUN_NAME_TAG] = name
    with transaction.atomic():
        run = Run.objects.create(
            experiment=experiment,
            name=name,
            user_id=caller.user.get_username(),
            created_by=caller.user,
            start_time=_int(start_time, "start_time", default=now_ms()),
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
        fields["end_time"] = _int(end_time, "end_time")
    if run_name:
        fields["name"] = _text(run_name, "run_name", 250)
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
            raise invalid(f"Invalid value {_shown(value)} for parameter '{what}' supplied.")
    for item in metrics:
        if isinstance(item, dict) and item.get("timestamp") in (None, ""):
            raise invalid(
                f"Invalid value {_shown(metrics)[:1000]} for parameter 'metrics' supplied."
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
    points = [_metric(m) for m in metrics]
    param_pairs = [_param(p) for p in params]
    seen: dict[str, str] = {}
    for key, value in param_pairs:
        if seen.setdefault(key, value) != value:
            raise invalid(f"Duplicate parameter keys have been submitted: '{key}' with two values.")
    tag_pairs = dict(_tag(t) for t in tags)
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


def _newer(a: Point | LatestMetric, b: Point | LatestMetric) -> bool:
    """MLflow's latest-metric order: step, then timestamp, then value (NaN lowest)."""
    return (a.step, a.timestamp, not a.is_nan, a.value) > (
        b.step,
        b.timestamp,
        not b.is_nan,
        b.value,
    )


def store_metrics(run: Run, points: list[Point]) -> None:
    """Append metric points and move each key's latest value (inside the caller's
    transaction, with the run's row locked).

    The points go in with one executemany, not bulk_create: building and preparing a
    model instance per point cost more than the insert itself (0.4 of 0.5 s a 1,000-point
    batch on a busy machine)."""
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
                name=_text(dataset["name"], "dataset.name", 500),
                digest=_text(dataset.get("digest", ""), "dataset.digest", 64, required=False),
            )
        )
    RunInput.objects.bulk_create(rows, ignore_conflicts=True)


def metric_history(caller: Caller, run_id, key, max_results=None, offset=0):
    run = get_run(caller, run_id)
    key = _text(key, "metric_key", MAX_KEY_LENGTH)
    limit = _int(max_results, "max_results", default=MAX_RESULTS_HISTORY, minimum=1)
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
    key = _text(key, "metric_key", MAX_KEY_LENGTH)
    limit = _int(max_results, "max_results", default=1000, minimum=2)
    if limit > MAX_RESULTS_HISTORY:
        raise invalid(f"Invalid value for 'max_results': at most {MAX_RESULTS_HISTORY}.")
    start, end = _int(start_step, "start_step"), _int(end_step, "end_step")
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


def search_runs(
    caller: Caller, experiment_ids, filter_string, run_view_type, max_results, order_by, offset
):
    if not isinstance(experiment_ids, list) or not experiment_ids:
        experiment_ids = ["0"] if not experiment_ids else [experiment_ids]
    experiments = [get_experiment(caller, e).pk for e in experiment_ids]
    limit = _int(max_results, "max_results", default=1000, minimum=1)
    if limit > MAX_RESULTS_RUNS:
        raise invalid(
            f"Invalid value {limit} for parameter 'max_results' supplied. "
            f"It must be at most {MAX_RESULTS_RUNS}."
        )
    runs = Run.objects.filter(experiment_id__in=experiments)
    runs = _view_type(runs, run_view_type)
    runs = search.apply_filter(runs, search.parse_filter(filter_string))
    runs = search.apply_order(
        runs, order_by if isinstance(order_by, list) else [order_by] if order_by else []
    )
    page = list(runs.values_list("pk", flat=True)[offset : offset + limit + 1])
    return load_runs(page[:limit]), (offset + limit if len(page) > limit else None)


def load_runs(pks: list[int]) -> list[Run]:
    """Runs with their data, in the given order, in five queries whatever their number."""
    runs = {r.pk: r for r in Run.objects.filter(pk__in=pks).select_related("experiment")}
    children = defaultdict(lambda: defaultdict(list))
    for model, name in (
        (LatestMetric, "latest"),
        (Param, "params"),
        (RunTag, "tags"),
        (RunInput, "inputs"),
    ):
        for row in model.objects.filter(run_id__in=pks).order_by("pk"):
            children[row.run_id][name].append(row)
    ordered = []
    for pk in pks:
        run = runs[pk]
        run.loaded = children[pk]
        ordered.append(run)
    return ordered


# --- logged models (MLflow 3) -------------------------------------------------------------

MODEL_STATUSES = ("LOGGED_MODEL_PENDING", "LOGGED_MODEL_READY", "LOGGED_MODEL_UPLOAD_FAILED")


def get_logged_model(caller: Caller, model_id, action: str = "experiment.view") -> LoggedModel:
    if not isinstance(model_id, str) or not model_id:
        raise invalid("Missing value for required parameter 'model_id'.")
    queryset = LoggedModel.objects.visible_to(caller.user).select_related(
        "experiment__project__tenant"
    )
    model = _visible(caller, queryset.filter(model_id=model_id), action, "Logged model", model_id)
    if model.lifecycle_stage != Lifecycle.ACTIVE:
        raise not_found(f"Logged model '{model_id}' does not exist.")
    return model


def _pairs(items, what: str, limit: int) -> dict[str, str]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise invalid(f"{what} is a list of key/value objects.")
    pairs = {}
    for item in items:
        key, value = _tag(item) if isinstance(item, dict) else _tag(None)
        pairs[key] = value[:limit]
    return pairs


def create_logged_model(
    caller: Caller,
    experiment_id,
    name=None,
    model_type=None,
    source_run_id=None,
    params=None,
    tags=None,
) -> LoggedModel:
    experiment = get_experiment(caller, experiment_id, "experiment.log")
    run = None
    if source_run_id:
        run = get_run(caller, source_run_id, "experiment.log")
        if run.experiment_id != experiment.pk:
            raise invalid(f"Run '{source_run_id}' is not in experiment {experiment.pk}.")
    model = LoggedModel.objects.create(
        experiment=experiment,
        name=_text(name, "name", 250, required=False) or f"model-{secrets.token_hex(3)}",
        model_type=_text(model_type, "model_type", 250, required=False),
        run=run,
        source_run_id=run.run_id if run else "",
        params=_pairs(params, "params", MAX_PARAM_VALUE_LENGTH),
        tags=_pairs(tags, "tags", MAX_TAG_VALUE_LENGTH),
        created_by=caller.user,
    )
    model.experiment = experiment
    return model


def update_logged_model(
    caller: Caller, model_id, *, status=None, params=None, tags=None, delete_tag=None
) -> LoggedModel:
    model = get_logged_model(caller, model_id, "experiment.log")
    if status is not None:
        if status not in MODEL_STATUSES:
            raise invalid(f"Invalid status '{status}': one of {list(MODEL_STATUSES)}.")
        model.status = status
    if params is not None:
        model.params = {**model.params, **_pairs(params, "params", MAX_PARAM_VALUE_LENGTH)}
    if tags is not None:
        model.tags = {**model.tags, **_pairs(tags, "tags", MAX_TAG_VALUE_LENGTH)}
    if delete_tag is not None:
        if delete_tag not in model.tags:
            raise not_found(f"No tag with key '{delete_tag}' on logged model '{model_id}'.")
        del model.tags[delete_tag]
    model.last_updated_timestamp_ms = now_ms()
    model.save(update_fields=["status", "params", "tags", "last_updated_timestamp_ms"])
    return model


def delete_logged_model(caller: Caller, model_id) -> None:
    model = get_logged_model(caller, model_id, "experiment.log")
    LoggedModel.objects.filter(pk=model.pk).update(lifecycle_stage=Lifecycle.DELETED)


def search_logged_models(caller: Caller, experiment_ids, filter_string, max_results, offset):
    if not isinstance(experiment_ids, list) or not experiment_ids:
        raise invalid("Name at least one experiment in 'experiment_ids'.")
    experiments = [get_experiment(caller, e).pk for e in experiment_ids]
    limit = _int(max_results, "max_results", default=100, minimum=1)
    models = LoggedModel.objects.filter(
        experiment_id__in=experiments, lifecycle_stage=Lifecycle.ACTIVE
    )
    models = search.apply_model_filter(models, search.parse_filter(filter_string, models=True))
    page = list(models.order_by("-creation_timestamp_ms", "-pk")[offset : offset + limit + 1])
    return page[:limit], (offset + limit if len(page) > limit else None)
