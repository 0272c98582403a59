"""MLflow 3 logged models: create, update (status, params, tags), delete, search."""

from __future__ import annotations

import secrets

from tracking import search
from tracking.errors import invalid, not_found
from tracking.models import Lifecycle, LoggedModel, now_ms
from tracking.services.access import Caller, get_experiment, get_run, visible
from tracking.services.validation import (
    MAX_PARAM_VALUE_LENGTH,
    MAX_TAG_VALUE_LENGTH,
    integer,
    tag_pair,
    text,
)

MODEL_STATUSES = ("LOGGED_MODEL_PENDING", "LOGGED_MODEL_READY", "LOGGED_MODEL_UPLOAD_FAILED")


def get_logged_model(caller: Caller, model_id, action: str = "experiment.view") -> LoggedModel:
    if not isinstance(model_id, str) or not model_id:
        raise invalid("Missing value for required parameter 'model_id'.")
    queryset = LoggedModel.objects.visible_to(caller.user).select_related(
        "experiment__project__tenant"
    )
    model = visible(caller, queryset.filter(model_id=model_id), action, "Logged model", model_id)
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
        key, value = tag_pair(item) if isinstance(item, dict) else tag_pair(None)
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
        name=text(name, "name", 250, required=False) or f"model-{secrets.token_hex(3)}",
        model_type=text(model_type, "model_type", 250, required=False),
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
    limit = integer(max_results, "max_results", default=100, minimum=1)
    models = LoggedModel.objects.filter(
        experiment_id__in=experiments, lifecycle_stage=Lifecycle.ACTIVE
    )
    models = search.apply_model_filter(models, search.parse_filter(filter_string, models=True))
    page = list(models.order_by("-creation_timestamp_ms", "-pk")[offset : offset + limit + 1])
    return page[:limit], (offset + limit if len(page) > limit else None)
