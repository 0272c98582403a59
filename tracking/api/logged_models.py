"""MLflow 3's logged model routes."""

from __future__ import annotations

from tracking.api.protocol import mlflow_view, next_page, offset_from_token
from tracking.services.logged_models import (
    create_logged_model,
    delete_logged_model,
    get_logged_model,
    search_logged_models,
    update_logged_model,
)


def logged_model_json(model) -> dict:
    info = {
        "model_id": model.model_id,
        "experiment_id": str(model.experiment_id),
        "name": model.name,
        "artifact_uri": model.artifact_uri,
        "creation_timestamp_ms": model.creation_timestamp_ms,
        "last_updated_timestamp_ms": model.last_updated_timestamp_ms,
        "status": model.status,
        "tags": [{"key": k, "value": v} for k, v in model.tags.items()],
    }
    if model.model_type:
        info["model_type"] = model.model_type
    if model.source_run_id:
        info["source_run_id"] = model.source_run_id
    if model.status_message:
        info["status_message"] = model.status_message
    return {
        "info": info,
        "data": {
            "params": [{"key": k, "value": v} for k, v in model.params.items()],
            "metrics": [],
        },
    }


@mlflow_view("POST")
def logged_models_create(request, caller, body):
    model = create_logged_model(
        caller,
        body.get("experiment_id"),
        body.get("name"),
        body.get("model_type"),
        body.get("source_run_id"),
        body.get("params"),
        body.get("tags"),
    )
    return {"model": logged_model_json(model)}


@mlflow_view("GET", "PATCH", "DELETE")
def logged_model(request, caller, body, model_id):
    if request.method == "GET":
        return {"model": logged_model_json(get_logged_model(caller, model_id))}
    if request.method == "PATCH":
        model = update_logged_model(caller, model_id, status=body.get("status"))
        return {"model": logged_model_json(model)}
    delete_logged_model(caller, model_id)


@mlflow_view("PATCH")
def logged_model_tags(request, caller, body, model_id):
    model = update_logged_model(caller, model_id, tags=body.get("tags") or [])
    return {"model": logged_model_json(model)}


@mlflow_view("DELETE")
def logged_model_tag(request, caller, body, model_id, key):
    update_logged_model(caller, model_id, delete_tag=key)


@mlflow_view("POST")
def logged_model_params(request, caller, body, model_id):
    update_logged_model(caller, model_id, params=body.get("params") or [])


@mlflow_view("POST")
def logged_models_search(request, caller, body):
    experiment_ids = body.get("experiment_ids") or []
    models, after = search_logged_models(
        caller,
        experiment_ids if isinstance(experiment_ids, list) else [experiment_ids],
        body.get("filter"),
        body.get("max_results"),
        offset_from_token(body.get("page_token")),
    )
    return {"models": [logged_model_json(m) for m in models], **next_page(after)}
