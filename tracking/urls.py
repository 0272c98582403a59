"""MLflow's REST paths, mounted at /api/2.0/ (config/urls.py)."""

from django.urls import path

from tracking import api, artifacts

urlpatterns = [
    path("mlflow/experiments/create", api.experiments_create),
    path("mlflow/experiments/get", api.experiments_get),
    path("mlflow/experiments/get-by-name", api.experiments_get_by_name),
    path("mlflow/experiments/search", api.experiments_search),
    path("mlflow/experiments/update", api.experiments_update),
    path("mlflow/experiments/delete", api.experiments_delete),
    path("mlflow/experiments/restore", api.experiments_restore),
    path("mlflow/experiments/set-experiment-tag", api.experiments_set_tag),
    path("mlflow/experiments/delete-experiment-tag", api.experiments_delete_tag),
    path("mlflow/runs/create", api.runs_create),
    path("mlflow/runs/get", api.runs_get),
    path("mlflow/runs/update", api.runs_update),
    path("mlflow/runs/delete", api.runs_delete),
    path("mlflow/runs/restore", api.runs_restore),
    path("mlflow/runs/log-metric", api.runs_log_metric),
    path("mlflow/runs/log-parameter", api.runs_log_parameter),
    path("mlflow/runs/set-tag", api.runs_set_tag),
    path("mlflow/runs/delete-tag", api.runs_delete_tag),
    path("mlflow/runs/log-batch", api.runs_log_batch),
    path("mlflow/runs/log-inputs", api.runs_log_inputs),
    path("mlflow/runs/log-model", api.runs_log_model),
    path("mlflow/runs/outputs", api.runs_outputs),
    path("mlflow/runs/search", api.runs_search),
    path("mlflow/metrics/get-history", api.metrics_get_history),
    path("mlflow/logged-models", api.logged_models_create),
    path("mlflow/logged-models/search", api.logged_models_search),
    path("mlflow/logged-models/<str:model_id>", api.logged_model),
    path("mlflow/logged-models/<str:model_id>/tags", api.logged_model_tags),
    path("mlflow/logged-models/<str:model_id>/tags/<path:key>", api.logged_model_tag),
    path("mlflow/logged-models/<str:model_id>/params", api.logged_model_params),
    path("mlflow-artifacts/artifacts", artifacts.artifact_list),
    path("mlflow-artifacts/artifacts/<path:path>", artifacts.artifact),
]
