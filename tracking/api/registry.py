"""The MLflow REST API (`/api/2.0/mlflow/…`), answering as MLflow's server does.

Plain Django views, not DRF: MLflow's client expects MLflow's JSON (proto field names,
errors as `{"error_code", "message"}`), not DRF's. Authentication is Gantry's: a
personal API token (`MLFLOW_TRACKING_TOKEN`, sent as `Authorization: Bearer gty_…`),
a job's tracking token (tracking.jobenv), an SSO access token, or, for reads only, a
browser session (a session cannot POST here: these views take no CSRF token).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from functools import wraps

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf_exceptions

from accounts.authentication import ApiTokenAuthentication, OidcBearerAuthentication
from accounts.models import ApiToken
from tracking import jobenv, registry, services
from tracking.errors import MlflowError, invalid
from tracking.models import Experiment, RegistryTag, Run
from tracking.services import Caller

logger = logging.getLogger(__name__)


def _caller(request) -> Caller:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if header:
        if scheme.lower() != "bearer" or not key:
            raise MlflowError(
                "Send a Gantry API token: 'Authorization: Bearer gty_…'.", "UNAUTHENTICATED"
            )
        if key.startswith(jobenv.PREFIX):
            caller = jobenv.caller_for_token(key)
            if caller is None:
                raise MlflowError("Invalid or expired job tracking token.", "UNAUTHENTICATED")
            return caller
        try:
            found = (
                ApiTokenAuthentication().authenticate(request)
                if key.startswith(ApiToken.PREFIX)
                else OidcBearerAuthentication().authenticate(request)
            )
        except drf_exceptions.APIException as exc:
            raise MlflowError(str(exc.detail), "UNAUTHENTICATED") from None
        if found is None:
            raise MlflowError("Unknown token: send a Gantry API token (gty_…).", "UNAUTHENTICATED")
        user, auth = found
        return Caller(user, auth if isinstance(auth, ApiToken) else None)
    if request.method == "GET" and request.user.is_authenticated:
        return Caller(request.user)
    raise MlflowError(
        "Authentication required: set MLFLOW_TRACKING_TOKEN to a Gantry API token.",
        "UNAUTHENTICATED",
    )


def _body(request) -> dict:
    if request.method == "GET":
        data = {}
        for key in request.GET:
            values = request.GET.getlist(key)
            data[key] = (
                values
                if len(values) > 1 or key in ("experiment_ids", "order_by", "run_ids")
                else values[0]
            )
        return data
    try:
        raw = request.body
    except RequestDataTooBig:
        raise invalid("The request body is too large.") from None
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise MlflowError("The request body is not valid JSON.", "BAD_REQUEST") from None
    if not isinstance(data, dict):
        raise MlflowError("The request body must be a JSON object.", "BAD_REQUEST")
    return data


def mlflow_view(*methods):
    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def wrapper(request, **kwargs):
            try:
                if request.method not in methods:
                    raise MlflowError(
                        f"This endpoint takes {', '.join(methods)}, not {request.method}.",
                        "ENDPOINT_NOT_FOUND",
                    )
                caller = _caller(request)
                result = view(request, caller, _body(request), **kwargs)
            except MlflowError as exc:
                return exc.response()
            except Http404:
                return MlflowError(
                    "The resource does not exist.", "RESOURCE_DOES_NOT_EXIST"
                ).response()
            except PermissionDenied as exc:
                return MlflowError(str(exc) or "Permission denied.", "PERMISSION_DENIED").response()
            if isinstance(result, JsonResponse):
                return result
            return JsonResponse(result if result is not None else {})

        return wrapper

    return decorate


# --- JSON shapes (MLflow's protos, field names as the client parses them) ----------------


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


def run_info_json(run: Run) -> dict:
    info = {
        "run_id": run.run_id,
        "run_uuid": run.run_id,
        "experiment_id": str(run.experiment_id),
        "run_name": run.name,
        "user_id": run.user_id,
        "status": run.status,
        "artifact_uri": run.artifact_uri,
        "lifecycle_stage": run.lifecycle_stage,
    }
    if run.start_time is not None:
        info["start_time"] = run.start_time
    if run.end_time is not None:
        info["end_time"] = run.end_time
    return info


def _number(value: float, is_nan: bool):
    if is_nan:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def run_json(run: Run) -> dict:
    loaded = getattr(run, "loaded", None)
    if loaded is None:
        run = services.load_runs([run.pk])[0]
        loaded = run.loaded
    return {
        "info": run_info_json(run),
        "data": {
            "metrics": [
                {
                    "key": m.key,
                    "value": _number(m.value, m.is_nan),
                    "timestamp": m.timestamp,
                    "step": m.step,
                }
                for m in loaded["latest"]
            ],
            "params": [{"key": p.key, "value": p.value} for p in loaded["params"]],
            "tags": [{"key": t.key, "value": t.value} for t in loaded["tags"]],
        },
        "inputs": {
            "dataset_inputs": [{"dataset": i.dataset, "tags": i.tags} for i in loaded["inputs"]]
        },
    }


def _offset(token) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(str(token).encode()))["offset"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise invalid(f"Invalid page token '{str(token)[:100]}'.") from None
    if not isinstance(offset, int) or offset < 0:
        raise invalid("Invalid page token.")
    return offset


def _token(offset: int | None) -> dict:
    if offset is None:
        return {}
    return {
        "next_page_token": base64.urlsafe_b64encode(
            json.dumps({"offset": offset}).encode()
        ).decode()
    }


# --- experiments ----------------------------------------------------------------------------


@mlflow_view("POST")
def experiments_create(request, caller, body):
    experiment = services.create_experiment(caller, body.get("name"), body.get("tags"))
    return {"experiment_id": str(experiment.pk)}


@mlflow_view("GET")
def experiments_get(request, caller, body):
    return {
        "experiment": experiment_json(
            services.get_experiment(caller, body.get("experiment_id")), caller
        )
    }


@mlflow_view("GET")
def experiments_get_by_name(request, caller, body):
    return {
        "experiment": experiment_json(
            services.get_experiment_by_name(caller, body.get("experiment_name")), caller
        )
    }


@mlflow_view("GET", "POST")
def experiments_search(request, caller, body):
    order_by = body.get("order_by") or []
    experiments, after = services.search_experiments(
        caller,
        body.get("view_type"),
        body.get("max_results"),
        body.get("filter"),
        order_by if isinstance(order_by, list) else [order_by],
        _offset(body.get("page_token")),
    )
    return {"experiments": [experiment_json(e, caller) for e in experiments], **_token(after)}


@mlflow_view("POST")
def experiments_update(request, caller, body):
    services.rename_experiment(caller, body.get("experiment_id"), body.get("new_name"))


@mlflow_view("POST")
def experiments_delete(request, caller, body):
    services.set_experiment_lifecycle(caller, body.get("experiment_id"), deleted=True)


@mlflow_view("POST")
def experiments_restore(request, caller, body):
    services.set_experiment_lifecycle(caller, body.get("experiment_id"), deleted=False)


@mlflow_view("POST")
def experiments_set_tag(request, caller, body):
    services.set_experiment_tag(
        caller, body.get("experiment_id"), body.get("key"), body.get("value")
    )


@mlflow_view("POST")
def experiments_delete_tag(request, caller, body):
    services.delete_experiment_tag(caller, body.get("experiment_id"), body.get("key"))


# --- runs -----------------------------------------------------------------------------------


def _run_id(body) -> str:
    return body.get("run_id") or body.get("run_uuid")


@mlflow_view("POST")
def runs_create(request, caller, body):
    run = services.create_run(
        caller,
        body.get("experiment_id"),
        body.get("start_time"),
        body.get("tags"),
        body.get("run_name"),
    )
    return {"run": run_json(run)}


@mlflow_view("GET")
def runs_get(request, caller, body):
    return {"run": run_json(services.get_run(caller, _run_id(body)))}


@mlflow_view("POST")
def runs_update(request, caller, body):
    run = services.update_run(
        caller, _run_id(body), body.get("status"), body.get("end_time"), body.get("run_name")
    )
    return {"run_info": run_info_json(run)}


@mlflow_view("POST")
def runs_delete(request, caller, body):
    services.set_run_lifecycle(caller, _run_id(body), deleted=True)


@mlflow_view("POST")
def runs_restore(request, caller, body):
    services.set_run_lifecycle(caller, _run_id(body), deleted=False)


@mlflow_view("POST")
def runs_log_metric(request, caller, body):
    metric = {k: body.get(k) for k in ("key", "value", "timestamp", "step")}
    services.log_batch(caller, _run_id(body), metrics=[metric])


@mlflow_view("POST")
def runs_log_parameter(request, caller, body):
    services.log_batch(
        caller, _run_id(body), params=[{"key": body.get("key"), "value": body.get("value")}]
    )


@mlflow_view("POST")
def runs_set_tag(request, caller, body):
    services.log_batch(
        caller, _run_id(body), tags=[{"key": body.get("key"), "value": body.get("value", "")}]
    )


@mlflow_view("POST")
def runs_delete_tag(request, caller, body):
    services.delete_tag(caller, _run_id(body), body.get("key"))


@mlflow_view("POST")
def runs_log_batch(request, caller, body):
    services.log_batch(
        caller, _run_id(body), body.get("metrics"), body.get("params"), body.get("tags")
    )


@mlflow_view("POST")
def runs_log_inputs(request, caller, body):
    services.log_inputs(caller, _run_id(body), body.get("datasets") or [])


@mlflow_view("POST")
def runs_log_model(request, caller, body):
    # The MLmodel description (a history tag MLflow 2 clients write): kept as that tag.
    services.log_batch(
        caller,
        _run_id(body),
        tags=[{"key": "mlflow.log-model.history", "value": str(body.get("model_json", ""))[:8000]}],
    )


@mlflow_view("POST")
def runs_outputs(request, caller, body):
    services.get_run(caller, _run_id(body), "experiment.log")


@mlflow_view("GET", "POST")
def runs_search(request, caller, body):
    experiment_ids = body.get("experiment_ids") or []
    runs, after = services.search_runs(
        caller,
        experiment_ids if isinstance(experiment_ids, list) else [experiment_ids],
        body.get("filter"),
        body.get("run_view_type"),
        body.get("max_results"),
        body.get("order_by") or [],
        _offset(body.get("page_token")),
    )
    return {"runs": [run_json(r) for r in runs], **_token(after)}


@mlflow_view("GET")
def metrics_get_history(request, caller, body):
    rows, after = services.metric_history(
        caller,
        _run_id(body),
        body.get("metric_key"),
        body.get("max_results"),
        _offset(body.get("page_token")),
    )
    return {
        "metrics": [
            {"key": k, "value": _number(v, nan), "timestamp": ts, "step": step}
            for k, v, nan, ts, step in rows
        ],
        **_token(after),
    }


# --- logged models (MLflow 3) -------------------------------------------------------------


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
    model = services.create_logged_model(
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
        return {"model": logged_model_json(services.get_logged_model(caller, model_id))}
    if request.method == "PATCH":
        model = services.update_logged_model(caller, model_id, status=body.get("status"))
        return {"model": logged_model_json(model)}
    services.delete_logged_model(caller, model_id)


@mlflow_view("PATCH")
def logged_model_tags(request, caller, body, model_id):
    model = services.update_logged_model(caller, model_id, tags=body.get("tags") or [])
    return {"model": logged_model_json(model)}


@mlflow_view("DELETE")
def logged_model_tag(request, caller, body, model_id, key):
    services.update_logged_model(caller, model_id, delete_tag=key)


@mlflow_view("POST")
def logged_model_params(request, caller, body, model_id):
    services.update_logged_model(caller, model_id, params=body.get("params") or [])


@mlflow_view("POST")
def logged_models_search(request, caller, body):
    experiment_ids = body.get("experiment_ids") or []
    models, after = services.search_logged_models(
        caller,
        experiment_ids if isinstance(experiment_ids, list) else [experiment_ids],
        body.get("filter"),
        body.get("max_results"),
        _offset(body.get("page_token")),
    )
    return {"models": [logged_model_json(m) for m in models], **_token(after)}


# --- model registry (tracking/registry.py, on the model hub) -------------------------------


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
        caller, body.get("filter"), body.get("max_results"), _offset(body.get("page_token"))
    )
    return {"registered_models": [model_json(m) for m in models], **_token(after)}


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
        caller, body.get("filter"), body.get("max_results"), _offset(body.get("page_token"))
    )
    return {"model_versions": [version_json(v) for v in versions], **_token(after)}


@mlflow_view("POST")
def model_versions_set_tag(request, caller, body):
    registry.set_tag(
        caller, body.get("name"), body.get("key"), body.get("value", ""), body.get("version")
    )


@mlflow_view("DELETE")
def model_versions_delete_tag(request, caller, body):
    registry.delete_tag(caller, body.get("name"), body.get("key"), body.get("version"))


@mlflow_view("GET")
def metrics_get_history_bulk_interval(request, caller, body):
    run_ids = body.get("run_ids") or []
    points = services.sampled_history(
        caller,
        run_ids if isinstance(run_ids, list) else [run_ids],
        body.get("metric_key"),
        body.get("max_results"),
        body.get("start_step"),
        body.get("end_step"),
    )
    key = body.get("metric_key")
    return {
        "metrics": [
            {"key": key, "value": _number(v, nan), "timestamp": ts, "step": step, "run_id": run_id}
            for run_id, step, v, nan, ts in points
        ]
    }
