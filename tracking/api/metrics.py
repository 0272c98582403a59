"""MLflow's metric history routes: a run's whole history, and the sampled read charts use."""

from __future__ import annotations

from tracking.api.protocol import metric_number, mlflow_view, next_page, offset_from_token
from tracking.api.runs import run_id_of
from tracking.services.metrics import metric_history, sampled_history


@mlflow_view("GET")
def metrics_get_history(request, caller, body):
    rows, after = metric_history(
        caller,
        run_id_of(body),
        body.get("metric_key"),
        body.get("max_results"),
        offset_from_token(body.get("page_token")),
    )
    return {
        "metrics": [
            {"key": k, "value": metric_number(v, nan), "timestamp": ts, "step": step}
            for k, v, nan, ts, step in rows
        ],
        **next_page(after),
    }


@mlflow_view("GET")
def metrics_get_history_bulk_interval(request, caller, body):
    run_ids = body.get("run_ids") or []
    points = sampled_history(
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
            {
                "key": key,
                "value": metric_number(v, nan),
                "timestamp": ts,
                "step": step,
                "run_id": run_id,
            }
            for run_id, step, v, nan, ts in points
        ]
    }
