"""What the executor asks for a job's MLflow variables (protocol: executor/README.md).

With its job token, the executor gets the job's run (made on first need, in the
project's default experiment) and a job tracking token, and hands them to the command
as MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, MLFLOW_RUN_ID and MLFLOW_EXPERIMENT_ID,
so unchanged MLflow code logs into its own job's run. A token not good for the job in
the URL gets the same 404 as a job that does not exist: the agent API's one
authentication (jobs.executor_api.executor_view).
"""

from django.conf import settings
from django.http import JsonResponse
from django.urls import path

from jobs.executor_api import executor_view
from tracking import jobenv


@executor_view("GET")
def tracking_environment(request, job, rank):
    run = jobenv.run_for_job(job)
    return JsonResponse(
        {
            "env": {
                "MLFLOW_TRACKING_URI": settings.GANTRY_URL,
                "MLFLOW_TRACKING_TOKEN": jobenv.job_token(job),
                "MLFLOW_RUN_ID": run.run_id,
                "MLFLOW_EXPERIMENT_ID": str(run.experiment_id),
            }
        }
    )


urlpatterns = [
    path("jobs/<int:job_id>/tracking", tracking_environment, name="executor-tracking"),
]
