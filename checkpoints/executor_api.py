"""The executor's checkpoint endpoints (under /api/v1/executor/, job token only, like
jobs/executor_api.py, whose authentication they reuse; protocol: executor/README.md).

    POST jobs/<id>/checkpoints                     begin: {name, step, metrics, files}
    PUT  jobs/<id>/checkpoints/<c>/files/<path>    one file (X-Gantry-Sha256)
    POST jobs/<id>/checkpoints/<c>/commit          complete only if every file arrived
    GET  jobs/<id>/checkpoints/latest              what to stage for a resume (or null)
    GET  jobs/<id>/checkpoints/<c>/files/<path>    a file of that checkpoint
    GET  jobs/<id>/checkpoints/save-window         is this stop a preemption, and how long
                                                   the command has to save before SIGTERM
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.storage import default_storage
from django.http import FileResponse, JsonResponse
from django.urls import path

from checkpoints.models import Checkpoint, CheckpointFile
from checkpoints.services import (
    CheckpointProblem,
    begin_checkpoint,
    commit_checkpoint,
    latest_complete,
    missing_files,
    receive_file,
)
from core.parsers import Unreadable, loads
from datasets.models import blob_key
from jobs.executor_api import executor_view


def _bad(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


def _not_found() -> JsonResponse:
    return _bad("Not found.", 404)


def _own(job, pk: int) -> Checkpoint | None:
    return Checkpoint.objects.filter(job=job, pk=pk).first()


def _describe(checkpoint: Checkpoint) -> dict:
    return {
        "id": checkpoint.pk,
        "name": checkpoint.name,
        "step": checkpoint.step,
        "state": checkpoint.state,
        "missing": missing_files(checkpoint) if checkpoint.state == "pending" else [],
    }


@executor_view("POST")
def begin(request, job, rank):
    try:
        body = loads(request.body or b"{}")
    except (Unreadable, RequestDataTooBig) as exc:
        return _bad(f"The body is not usable JSON: {exc}")
    if not isinstance(body, dict):
        return _bad("The body must be a JSON object.")
    try:
        checkpoint = begin_checkpoint(job, body)
    except CheckpointProblem as exc:
        return _bad(str(exc))
    return JsonResponse(_describe(checkpoint), status=201)


@executor_view("PUT", "GET")
def file(request, job, rank, pk: int, path: str):
    if request.method == "GET":
        return _download(job, pk, path)
    checkpoint = _own(job, pk)
    if checkpoint is None:
        return _not_found()
    try:
        entry = receive_file(checkpoint, path, request, request.headers.get("X-Gantry-Sha256"))
    except CheckpointProblem as exc:
        return _bad(str(exc))
    return JsonResponse({"path": entry.path, "size": entry.size, "sha256": entry.sha256})


def _download(job, pk: int, path: str):
    """Only files of the checkpoint this job resumes from (its own, or its source's)."""
    latest = latest_complete(job)
    if latest is None or latest.pk != pk:
        return _not_found()
    entry = CheckpointFile.objects.filter(checkpoint=latest, path=path).first()
    if entry is None:
        return _not_found()
    return FileResponse(
        default_storage.open(blob_key(entry.sha256), "rb"),
        as_attachment=True,
        filename=path.rsplit("/", 1)[-1],
    )


@executor_view("POST")
def commit(request, job, rank, pk: int):
    checkpoint = _own(job, pk)
    if checkpoint is None:
        return _not_found()
    try:
        checkpoint = commit_checkpoint(checkpoint)
    except CheckpointProblem as exc:
        return _bad(str(exc), 409)
    return JsonResponse(_describe(checkpoint))


@executor_view("GET")
def latest(request, job, rank):
    checkpoint = latest_complete(job)
    if checkpoint is None:
        return JsonResponse({"checkpoint": None})
    files = [
        {"path": f.path, "size": f.size, "sha256": f.sha256}
        for f in checkpoint.files.order_by("path")
    ]
    return JsonResponse({"checkpoint": {**_describe(checkpoint), "files": files}})


@executor_view("GET")
def save_window(request, job, rank):
    preempt = job.preempt_requested_at is not None and job.cancel_requested_at is None
    return JsonResponse(
        {"preempt": preempt, "save_seconds": settings.GANTRY_PREEMPT_SAVE_SECONDS if preempt else 0}
    )


urlpatterns = [
    path("jobs/<int:job_id>/checkpoints", begin, name="executor-checkpoint-begin"),
    path("jobs/<int:job_id>/checkpoints/latest", latest, name="executor-checkpoint-latest"),
    path(
        "jobs/<int:job_id>/checkpoints/save-window", save_window, name="executor-checkpoint-save"
    ),
    path(
        "jobs/<int:job_id>/checkpoints/<int:pk>/files/<path:path>",
        file,
        name="executor-checkpoint-file",
    ),
    path("jobs/<int:job_id>/checkpoints/<int:pk>/commit", commit, name="executor-checkpoint-commit"),
]
