"""MLflow's metric history routes: a run's whole history, and the sampled read charts use."""

from __future__ import annotations

from tracking.api.protocol import metric_number, mlflow_view, next_page, offset_from_token
from tracking.api.runs import run_id_of
from tracking.errors import invalid
from tracking.services.metrics import MAX_RESULTS_HISTORY, metric_history, sampled_history
from tracking.services.validation import integer


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


@mlflow_view("GET")
def metrics_get_history_bulk(request, caller, body):
    """MLflow's UI read of one metric over several runs (`run_id` repeated, at most 100),
    each run's points in step order, as MLflow's server answers it."""
    run_ids = body.get("run_id") or []
    run_ids = run_ids if isinstance(run_ids, list) else [run_ids]
    if not run_ids or len(run_ids) > 100:
        raise invalid("GetMetricHistoryBulk takes 1 to 100 run_id values.")
    if body.get("metric_key") is None:
        raise invalid("GetMetricHistoryBulk request must specify a metric_key.")
    limit = integer(body.get("max_results"), "max_results", MAX_RESULTS_HISTORY, minimum=1)
    metrics = []
    for run_id in sorted(map(str, run_ids)):
        rows, _ = metric_history(
            caller, run_id, body.get("metric_key"), min(limit, MAX_RESULTS_HISTORY), 0
        )
        metrics += [
            {
                "key": k,
                "value": metric_number(v, nan),
                "timestamp": ts,
                "step": step,
                "run_id": run_id,
            }
            for k, v, nan, ts, step in rows
        ]
    return {"metrics": metrics}
