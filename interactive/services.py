"""What the notebook proxy asks of a job: where to forward, and that the user is active."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from jobs.models import Job, JobKind, JobWorker
from jobs.states import JobState


def notebook_target(job: Job) -> tuple[str, int, str, str] | None:
    """Where the proxy (interactive/proxy.py) forwards /jobs/<id>/lab/: (host, port, token, base_url).

    None unless the job is a running notebook. The token never leaves the server.
    """
    if job.kind != JobKind.NOTEBOOK or job.state != JobState.RUNNING:
        return None
    worker = JobWorker.objects.filter(job=job, rank=0).first()
    if worker is None or not worker.port:
        return None
    return worker.host or "127.0.0.1", worker.port, worker.notebook_token, f"/jobs/{job.pk}/lab/"


def touch_notebook(job: Job) -> None:
    """The proxy calls this on every request (at most once a minute is written)."""
    cutoff = timezone.now() - timedelta(minutes=1)
    Job.objects.filter(pk=job.pk).exclude(last_activity_at__gt=cutoff).update(
        last_activity_at=timezone.now()
    )
