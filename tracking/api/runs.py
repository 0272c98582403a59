"""MLflow's run routes: create, update, delete, log, search."""

from __future__ import annotations

from tracking.api.protocol import metric_number, mlflow_view, next_page, offset_from_token
from tracking.models import Run
from tracking.services.access import get_run
from tracking.services.runs import (
    create_run,
    delete_tag,
    load_runs,
    log_batch,
    log_inputs,
    search_runs,
    set_run_lifecycle,
    update_run,
)


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


def run_json(run: Run) -> dict:
    loaded = getattr(run, "loaded", None)
    if loaded is None:
        run = load_runs([run.pk])[0]
        loaded = run.loaded
    return {
        "info": run_info_json(run),
        "data": {
            "metrics": [
                {
                    "key": m.key,
                    "value": metric_number(m.value, m.is_nan),
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
        "outputs": {"model_outputs": [{"model_id": m, "step": 0} for m in loaded["outputs"]]},
    }


def run_id_of(body) -> str:
    return body.get("run_id") or body.get("run_uuid")


@mlflow_view("POST")
def runs_create(request, caller, body):
    run = create_run(
        caller,
        body.get("experiment_id"),
        body.get("start_time"),
        body.get("tags"),
        body.get("run_name"),
    )
    return {"run": run_json(run)}


@mlflow_view("GET")
def runs_get(request, caller, body):
    return {"run": run_json(get_run(caller, run_id_of(body)))}


@mlflow_view("POST")
def runs_update(request, caller, body):
    run = update_run(
        caller, run_id_of(body), body.get("status"), body.get("end_time"), body.get("run_name")
    )
    return {"run_info": run_info_json(run)}


@mlflow_view("POST")
def runs_delete(request, caller, body):
    set_run_lifecycle(caller, run_id_of(body), deleted=True)


@mlflow_view("POST")
def runs_restore(request, caller, body):
    set_run_lifecycle(caller, run_id_of(body), deleted=False)


@mlflow_view("POST")
def runs_log_metric(request, caller, body):
    metric = {k: body.get(k) for k in ("key", "value", "timestamp", "step")}
    log_batch(caller, run_id_of(body), metrics=[metric])


@mlflow_view("POST")
def runs_log_parameter(request, caller, body):
    log_batch(
        caller, run_id_of(body), params=[{"key": body.get("key"), "value": body.get("value")}]
    )


@mlflow_view("POST")
def runs_set_tag(request, caller, body):
    log_batch(
        caller, run_id_of(body), tags=[{"key": body.get("key"), "value": body.get("value", "")}]
    )


@mlflow_view("POST")
def runs_delete_tag(request, caller, body):
    delete_tag(caller, run_id_of(body), body.get("key"))


@mlflow_view("POST")
def runs_log_batch(request, caller, body):
    log_batch(caller, run_id_of(body), body.get("metrics"), body.get("params"), body.get("tags"))


@mlflow_view("POST")
def runs_log_inputs(request, caller, body):
    log_inputs(caller, run_id_of(body), body.get("datasets") or [])


@mlflow_view("POST")
def runs_log_model(request, caller, body):
    # The MLmodel description (a history tag MLflow 2 clients write): kept as that tag.
    log_batch(
        caller,
        run_id_of(body),
        tags=[{"key": "mlflow.log-model.history", "value": str(body.get("model_json", ""))[:8000]}],
    )


@mlflow_view("POST")
def runs_outputs(request, caller, body):
    get_run(caller, run_id_of(body), "experiment.log")


@mlflow_view("GET", "POST")
def runs_search(request, caller, body):
    experiment_ids = body.get("experiment_ids") or []
    runs, after = search_runs(
        caller,
        experiment_ids if isinstance(experiment_ids, list) else [experiment_ids],
        body.get("filter"),
        body.get("run_view_type"),
        body.get("max_results"),
        body.get("order_by") or [],
        offset_from_token(body.get("page_token")),
    )
    return {"runs": [run_json(r) for r in runs], **next_page(after)}
