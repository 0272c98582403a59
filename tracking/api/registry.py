"""MLflow's model registry routes, on the model hub (services: tracking/services/registry.py)."""

from __future__ import annotations

from tracking.api.protocol import mlflow_view, next_page, offset_from_token
from tracking.errors import invalid
from tracking.models import RegistryTag
from tracking.services import registry


def _ms(moment) -> int:
    return int(moment.timestamp() * 1000)


def version_json(version) -> dict:
    source = getattr(version, "mlflow_source", None) if hasattr(version, "mlflow_source") else None
    tags = [
        {"key": t.key, "value": t.value}
        for t in RegistryTag.objects.filter(version=version).order_by("key")
    ]
    data = {
        "name": version.model.name,
        "version": str(version.number),
        "creation_timestamp": _ms(version.created_at),
        "last_updated_timestamp": _ms(version.created_at),
        "user_id": version.created_by.get_username() if version.created_by_id else "",
        "current_stage": "None",
        "description": version.description,
        "source": source.source if source else f"mlflow-artifacts:/registry/{version.pk}",
        "run_id": source.run_id if source else "",
        "status": "READY",
        "tags": tags,
        "aliases": sorted(a.name for a in version.aliases.all()),
    }
    if source and source.model_id:
        data["model_id"] = source.model_id
    return data


def model_json(model) -> dict:
    latest = model.versions.order_by("-number").first()
    if latest is not None:
        latest.model = model
    return {
        "name": model.name,
        "creation_timestamp": _ms(model.created_at),
        "last_updated_timestamp": _ms(model.updated_at),
        "description": model.description,
        "user_id": model.created_by.get_username() if model.created_by_id else "",
        "latest_versions": [version_json(latest)] if latest else [],
        "tags": [
            {"key": t.key, "value": t.value}
            for t in RegistryTag.objects.filter(model=model, version=None).order_by("key")
        ],
        "aliases": [
            {"alias": a.name, "version": str(a.version.number)}
            for a in model.aliases.select_related("version")
        ],
    }


@mlflow_view("POST")
def registered_models_create(request, caller, body):
    model = registry.create_model(
        caller, body.get("name"), body.get("tags"), body.get("description")
    )
    return {"registered_model": model_json(model)}


@mlflow_view("GET")
def registered_models_get(request, caller, body):
    return {"registered_model": model_json(registry.get_model(caller, body.get("name")))}


@mlflow_view("POST")
def registered_models_rename(request, caller, body):
    model = registry.update_model(caller, body.get("name"), new_name=body.get("new_name"))
    return {"registered_model": model_json(model)}


@mlflow_view("PATCH")
def registered_models_update(request, caller, body):
    model = registry.update_model(caller, body.get("name"), description=body.get("description", ""))
    return {"registered_model": model_json(model)}


@mlflow_view("DELETE")
def registered_models_delete(request, caller, body):
    registry.delete_model(caller, body.get("name"))


@mlflow_view("GET", "POST")
def registered_models_search(request, caller, body):
    models, after = registry.search_models(
        caller,
        body.get("filter"),
        body.get("max_results"),
        offset_from_token(body.get("page_token")),
    )
    return {"registered_models": [model_json(m) for m in models], **next_page(after)}


@mlflow_view("POST", "GET")
def registered_models_latest(request, caller, body):
    model = registry.get_model(caller, body.get("name"))
    latest = model.versions.order_by("-number").first()
    if latest is None:
        return {"model_versions": []}
    latest.model = model
    return {"model_versions": [version_json(latest)]}


@mlflow_view("POST")
def registered_models_set_tag(request, caller, body):
    registry.set_tag(caller, body.get("name"), body.get("key"), body.get("value", ""))


@mlflow_view("DELETE")
def registered_models_delete_tag(request, caller, body):
    registry.delete_tag(caller, body.get("name"), body.get("key"))


@mlflow_view("GET", "POST", "DELETE")
def registered_models_alias(request, caller, body):
    if request.method == "GET":
        version = registry.version_by_alias(caller, body.get("name"), body.get("alias"))
        return {"model_version": version_json(version)}
    if request.method == "POST":
        registry.set_alias(caller, body.get("name"), body.get("alias"), body.get("version"))
    else:
        registry.delete_alias(caller, body.get("name"), body.get("alias"))


@mlflow_view("POST")
def model_versions_create(request, caller, body):
    version = registry.create_version(
        caller,
        body.get("name"),
        body.get("source"),
        body.get("run_id"),
        body.get("tags"),
        body.get("description"),
        body.get("model_id"),
    )
    return {"model_version": version_json(version)}


@mlflow_view("GET")
def model_versions_get(request, caller, body):
    return {
        "model_version": version_json(
            registry.get_version(caller, body.get("name"), body.get("version"))
        )
    }


@mlflow_view("PATCH")
def model_versions_update(request, caller, body):
    version = registry.update_version(
        caller, body.get("name"), body.get("version"), body.get("description")
    )
    return {"model_version": version_json(version)}


@mlflow_view("DELETE")
def model_versions_delete(request, caller, body):
    registry.get_version(caller, body.get("name"), body.get("version"), "model.delete")
    raise invalid("Gantry keeps model versions: delete the registered model, or move its aliases.")


@mlflow_view("GET")
def model_versions_download_uri(request, caller, body):
    version = registry.get_version(caller, body.get("name"), body.get("version"))
    return {"artifact_uri": f"mlflow-artifacts:/registry/{version.pk}"}


@mlflow_view("GET", "POST")
def model_versions_search(request, caller, body):
    versions, after = registry.search_versions(
        caller,
        body.get("filter"),
        body.get("max_results"),
        offset_from_token(body.get("page_token")),
    )
    return {"model_versions": [version_json(v) for v in versions], **next_page(after)}


@mlflow_view("POST")
def model_versions_set_tag(request, caller, body):
    registry.set_tag(
        caller, body.get("name"), body.get("key"), body.get("value", ""), body.get("version")
    )


@mlflow_view("DELETE")
def model_versions_delete_tag(request, caller, body):
    registry.delete_tag(caller, body.get("name"), body.get("key"), body.get("version"))
