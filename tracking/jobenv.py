"""Jobs are runs: the MLflow variables every job gets, and the job's tracking token.

jobs never imports tracking: the executor asks for the variables with its job token
(tracking/executor_api.py) and relays the command's MLflow calls (executor/mlflow_relay.py).
The token (`gmt_<job>_<signature>`) is derived from the job's own token hash, so it needs
no table, is good for exactly as long as the job's token (while the job runs and for
GANTRY_JOB_TOKEN_GRACE_MINUTES after), and changes with each attempt. It acts as the
job's submitter through a write token limited to the job's project, and writes only to
the job's own run.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import ApiToken, TokenScope
from jobs.models import Job
from tracking.models import Run, RunTag, now_ms

PREFIX = "gmt_"


def _signature(job_id: int, token_hash: str) -> str:
    message = f"gantry-tracking:{job_id}:{token_hash}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def job_token(job: Job) -> str:
    return f"{PREFIX}{job.pk}_{_signature(job.pk, job.token_hash)}"


def caller_for_token(token: str):
    from tracking.services.access import Caller

    job_id, _, signature = token[len(PREFIX) :].partition("_")
    if not job_id.isdigit() or len(job_id) > 18:
        return None
    job = Job.objects.select_related("project__tenant", "created_by").filter(pk=int(job_id)).first()
    if job is None or not job.token_hash or job.created_by is None or not job.created_by.is_active:
        return None
    if not hmac.compare_digest(signature, _signature(job.pk, job.token_hash)):
        return None
    if job.is_terminal:
        grace = timedelta(minutes=settings.GANTRY_JOB_TOKEN_GRACE_MINUTES)
        if job.finished_at is None or timezone.now() - job.finished_at > grace:
            return None
    scoped = ApiToken(user=job.created_by, scope=TokenScope.WRITE, project=job.project, name="job")
    return Caller(job.created_by, scoped, job=job)


def run_for_job(job: Job) -> Run:
    """The job's run, in its project's default experiment, made on first need."""
    from tracking.services.access import default_experiment
    from tracking.services.runs import RUN_NAME_TAG

    run = Run.objects.filter(job=job).first()
    if run is not None:
        return run
    experiment = default_experiment(job.project)
    try:
        with transaction.atomic():
            run = Run.objects.create(
                experiment=experiment,
                job=job,
                name=job.name[:250],
                user_id=job.created_by.get_username() if job.created_by else "",
                created_by=job.created_by,
                start_time=now_ms(),
            )
            RunTag.objects.bulk_create(
                [
                    RunTag(run=run, key=RUN_NAME_TAG, value=run.name),
                    RunTag(run=run, key="gantry.job", value=str(job.pk)),
                ]
            )
    except IntegrityError:  # another worker of the job made it first
        run = Run.objects.get(job=job)
    return run
