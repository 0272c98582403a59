"""MLflow's experiment routes."""

from __future__ import annotations

from tracking.api.protocol import mlflow_view, next_page, offset_from_token
from tracking.models import Experiment
from tracking.services.access import Caller, get_experiment, get_experiment_by_name
from tracking.services.experiments import (
    create_experiment,
    delete_experiment_tag,
    rename_experiment,
    search_experiments,
    set_experiment_lifecycle,
    set_experiment_tag,
)


def experiment_json(experiment: Experiment, caller: Caller | None = None) -> dict:
    tags = getattr(experiment, "_prefetched_objects_cache", {}).get("tags")
    tags = experiment.tags.all() if tags is None else tags
    return {
        "experiment_id": str(experiment.pk),
        # Bare for a caller limited to the experiment's project (the project looks like a
        # whole MLflow server to it), `tenant/project/name` otherwise.
        "name": experiment.name
        if caller is not None and caller.project_id == experiment.project_id
        else experiment.full_name,
        "artifact_location": f"mlflow-artifacts:/{experiment.pk}",
        "lifecycle_stage": experiment.lifecycle_stage,
        "last_update_time": experiment.last_update_time,
        "creation_time": experiment.creation_time,
        "tags": [{"key": t.key, "value": t.value} for t in tags],
    }


@mlflow_view("POST")
def experiments_create(request, caller, body):
    experiment = create_experiment(caller, body.get("name"), body.get("tags"))
    return {"experiment_id": str(experiment.pk)}


@mlflow_view("GET")
def experiments_get(request, caller, body):
    return {
        "experiment": experiment_json(get_experiment(caller, body.get("experiment_id")), caller)
    }


@mlflow_view("GET")
def experiments_get_by_name(request, caller, body):
    return {
        "experiment": experiment_json(
            get_experiment_by_name(caller, body.get("experiment_name")), caller
        )
    }


@mlflow_view("GET", "POST")
def experiments_search(request, caller, body):
    order_by = body.get("order_by") or []
    experiments, after = search_experiments(
        caller,
        body.get("view_type"),
        body.get("max_results"),
        body.get("filter"),
        order_by if isinstance(order_by, list) else [order_by],
        offset_from_token(body.get("page_token")),
    )
    return {"experiments": [experiment_json(e, caller) for e in experiments], **next_page(after)}


@mlflow_view("POST")
def experiments_update(request, caller, body):
    rename_experiment(caller, body.get("experiment_id"), body.get("new_name"))


@mlflow_view("POST")
def experiments_delete(request, caller, body):
    set_experiment_lifecycle(caller, body.get("experiment_id"), deleted=True)


@mlflow_view("POST")
def experiments_restore(request, caller, body):
    set_experiment_lifecycle(caller, body.get("experiment_id"), deleted=False)


@mlflow_view("POST")
def experiments_set_tag(request, caller, body):
    set_experiment_tag(caller, body.get("experiment_id"), body.get("key"), body.get("value"))


@mlflow_view("POST")
def experiments_delete_tag(request, caller, body):
    delete_experiment_tag(caller, body.get("experiment_id"), body.get("key"))
