"""Experiments: create, rename, delete and restore, tags, search."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from tracking import search
from tracking.errors import MlflowError, invalid, not_found
from tracking.models import Experiment, ExperimentTag, Lifecycle, Run, now_ms
from tracking.services.access import Caller, get_experiment, project_of_caller, split_name
from tracking.services.validation import integer, listed, tag_pair, text


def create_experiment(caller: Caller, name, tags=None) -> Experiment:
    name = text(name, "name", 500)
    project, bare = split_name(caller, name)
    if project is None:
        project = project_of_caller(caller, "Experiment", name)
    if not caller.can("experiment.view", project):
        raise not_found(f"The project of experiment '{name}' does not exist.")
    if not caller.can("experiment.log", project):
        raise MlflowError("You may not create experiments in this project.", "PERMISSION_DENIED")
    pairs = [tag_pair(t) for t in listed(tags, "tags")]
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
    new_name = text(new_name, "new_name", 500)
    project, bare = split_name(caller, new_name)
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
    key, value = tag_pair({"key": key, "value": value})
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
    queryset = search.apply_view_type(queryset, view_type)
    queryset = search.apply_experiment_filter(
        queryset, search.parse_filter(filter_string, experiments=True)
    )
    queryset = search.apply_experiment_order(queryset, order_by)
    limit = integer(max_results, "max_results", default=1000, minimum=1)
    if limit > 50000:
        raise invalid("Invalid value for max_results: at most 50000.")
    page = list(queryset.prefetch_related("tags")[offset : offset + limit + 1])
    return page[:limit], (offset + limit if len(page) > limit else None)
