"""The agent API: every endpoint the executor talks to (protocol: executor/README.md):
spec, logs, metrics, heartbeats, status, outputs, the job's code (a snapshot's manifest
and contents) and the input files it stages (dataset files, model files).

Plain Django views, not DRF: they take no session and no personal API token,
only a job token (`Authorization: Bearer gjt_…`), checked in one place
(`JobTokenAuthentication`), and a job token reaches nothing but these URLs (the
DRF authenticators ignore its prefix). Any token that is not good for the job in
the URL gets the same 404 as a job that does not exist. They are left out of the
public API schema on purpose.

Dataset files are asked of datasets' services (jobs -> datasets). Model files
belong to modelhub, which sits above jobs: jobs asks `core.registry.model_file_for_job`,
which modelhub provides (modelhub/apps.py), so jobs never imports it.
"""

from __future__ import annotations

from functools import wraps

from django.core.exceptions import RequestDataTooBig
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, JsonResponse
from django.urls import path, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from core import registry
from core.parsers import Unreadable, loads
from datasets import downloads
from datasets.models import DatasetFile, blob_key
from datasets.services.inputs import executor_may_read
from jobs.models import Job
from jobs.services.ingestion import (
    ingest_logs,
    ingest_metrics,
    record_heartbeat,
    record_worker_status,
)
from jobs.services.launch import executor_job, job_spec_for_executor, parse_token
from jobs.services.outputs import store_artifact
from snapshots import services as snapshots


def _not_found() -> JsonResponse:
    return JsonResponse({"detail": "Not found."}, status=404)


def _bad(message: str) -> JsonResponse:
    return JsonResponse({"detail": message}, status=400)


def _unauthorized() -> JsonResponse:
    response = JsonResponse({"detail": "A job token is required."}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="executor"'
    return response


class NoJobToken(Exception):
    """The request carries no usable job token (answered 401)."""


class JobTokenAuthentication:
    """The one way into the agent API: `Authorization: Bearer gjt_<rank>_<secret>`."""

    def authenticate(self, request, job_id: int | None = None) -> tuple[Job, int] | None:
        """The (job, worker rank) the request's token is good for, or None (answered 404
        like a job that does not exist). A URL that names no job (model files) takes the
        job the token belongs to. Raises NoJobToken when there is no token to check."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise NoJobToken
        if job_id is None:
            parsed = parse_token(token)
            if parsed is None:
                raise NoJobToken
            job_id = (
                Job.objects.filter(token_hash=Job.hash_token(parsed[1]))
                .values_list("pk", flat=True)
                .first()
            )
            if job_id is None:
                return None
        return executor_job(job_id, token)


authentication = JobTokenAuthentication()


def executor_view(*methods):
    """Authenticate the job token; pass (request, job, rank, **url kwargs) to the view."""

    def decorate(view):
        @csrf_exempt
        @require_http_methods(list(methods))
        @wraps(view)
        def wrapper(request, job_id: int | None = None, **kwargs):
            try:
                found = authentication.authenticate(request, job_id)
            except NoJobToken:
                return _unauthorized()
            if found is None:
                return _not_found()
            job, rank = found
            return view(request, job, rank, **kwargs)

        return wrapper

    return decorate


def _json_body(request, rank: int) -> dict | JsonResponse:
    try:
        # Log text may hold NUL (programs print it); nothing else parsers.loads refuses.
        body = loads(request.body or b"{}", nul=True)
    except RequestDataTooBig:
        return JsonResponse({"detail": "The body is too large; send smaller batches."}, status=413)
    except Unreadable as exc:
        return _bad(f"The body is not usable JSON: {exc}")
    if not isinstance(body, dict):
        return _bad("The body must be a JSON object.")
    worker = body.get("worker", rank)
    if worker != rank:
        return _bad(f"This token belongs to worker {rank}, not {worker!r}.")
    return body


@executor_view("GET")
def spec(request, job, rank):
    return JsonResponse(job_spec_for_executor(job, rank))


@executor_view("POST")
def logs(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    try:
        last = ingest_logs(job, rank, body.get("lines", []))
    except ValueError as exc:
        return _bad(str(exc))
    return JsonResponse({"last_seq": last})


@executor_view("POST")
def metrics(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    try:
        last = ingest_metrics(job, rank, body.get("metrics", []))
    except ValueError as exc:
        return _bad(str(exc))
    return JsonResponse({"last_seq": last})


@executor_view("POST")
def heartbeat(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    return JsonResponse({"cancel": record_heartbeat(job, rank)})


@executor_view("POST")
def status(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    try:
        record_worker_status(job, rank, body)
    except ValueError as exc:
        return _bad(str(exc))
    return JsonResponse({"ok": True})


@executor_view("PUT")
def artifact(request, job, rank, path: str):
    worker = request.headers.get("X-Gantry-Worker", str(rank))
    if worker != str(rank):
        return _bad(f"This token belongs to worker {rank}, not {worker!r}.")
    try:
        artifact, created = store_artifact(
            job, rank, path, request, request.headers.get("X-Gantry-Sha256")
        )
    except ValueError as exc:
        return _bad(str(exc))
    except Http404:
        return _not_found()
    return JsonResponse(
        {"path": artifact.path, "size": artifact.size, "sha256": artifact.sha256},
        status=201 if created else 200,
    )


@executor_view("GET")
def code(request, job, rank):
    """The manifest of the job's code snapshot: path, size, sha256, mode and a URL per file."""
    if job.code_snapshot_id is None:
        return _not_found()
    files = snapshots.files_for_executor(
        job.code_snapshot, lambda sha: reverse("executor-code-file", args=[job.pk, sha])
    )
    return JsonResponse({"snapshot": job.code_snapshot_id, "files": files})


@executor_view("GET")
def code_file(request, job, rank, sha256: str):
    """One content of the job's code snapshot (filesystem storage; S3 answers presigned)."""
    if not snapshots.executor_may_read_blob(job.code_snapshot_id, sha256):
        return _not_found()
    return FileResponse(default_storage.open(blob_key(sha256), "rb"), as_attachment=True)


@executor_view("GET")
def dataset_file(request, job, rank, pk: int):
    """A job input file (filesystem storage; with S3 the spec carries presigned GETs): only
    of a version the job names in its inputs."""
    file = DatasetFile.objects.filter(pk=pk).first()
    if file is None or not executor_may_read(job, file):
        return _not_found()
    return downloads.file_response(file)


@executor_view("GET")
def model_file(request, job, rank, pk: int):
    """A model version's file, staged by a prediction job (its URL names no job)."""
    found = registry.model_file_for_job(job, pk)  # only files of the job's own project
    if found is None:
        return _not_found()
    return FileResponse(
        found.file.open("rb"), as_attachment=True, filename=found.path.rsplit("/", 1)[-1]
    )


urlpatterns = [
    path("jobs/<int:job_id>/spec", spec, name="executor-spec"),
    path("jobs/<int:job_id>/logs", logs, name="executor-logs"),
    path("jobs/<int:job_id>/metrics", metrics, name="executor-metrics"),
    path("jobs/<int:job_id>/heartbeat", heartbeat, name="executor-heartbeat"),
    path("jobs/<int:job_id>/status", status, name="executor-status"),
    path("jobs/<int:job_id>/artifacts/<path:path>", artifact, name="executor-artifact"),
    path("jobs/<int:job_id>/dataset-files/<int:pk>", dataset_file, name="executor-dataset-file"),
    path("jobs/<int:job_id>/code", code, name="executor-code"),
    path("jobs/<int:job_id>/code-files/<str:sha256>", code_file, name="executor-code-file"),
    path("model-files/<int:pk>", model_file, name="executor-model-file"),
]
