"""The endpoints the executor talks to (protocol: executor/README.md).

Plain Django views, not DRF: they take no session and no personal API token,
only a job token (`Authorization: Bearer gjt_…`), and a job token reaches
nothing but these URLs (the DRF authenticators ignore its prefix). Any token
that is not good for the job in the URL gets the same 404 as a job that does
not exist. They are left out of the public API schema on purpose.
"""

from __future__ import annotations

from functools import wraps

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from core.parsers import Unreadable, loads
from jobs import services


def _not_found() -> JsonResponse:
    return JsonResponse({"detail": "Not found."}, status=404)


def _bad(message: str) -> JsonResponse:
    return JsonResponse({"detail": message}, status=400)


def executor_view(*methods):
    """Authenticate the job token; pass (request, job, rank[, body]) to the view."""

    def decorate(view):
        @csrf_exempt
        @require_http_methods(list(methods))
        @wraps(view)
        def wrapper(request, job_id: int, **kwargs):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                response = JsonResponse({"detail": "A job token is required."}, status=401)
                response["WWW-Authenticate"] = 'Bearer realm="executor"'
                return response
            found = services.executor_job(job_id, token.strip())
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
    return JsonResponse(services.job_spec_for_executor(job, rank))


@executor_view("POST")
def logs(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    try:
        last = services.ingest_logs(job, rank, body.get("lines", []))
    except ValueError as exc:
        return _bad(str(exc))
    return JsonResponse({"last_seq": last})


@executor_view("POST")
def metrics(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    try:
        last = services.ingest_metrics(job, rank, body.get("metrics", []))
    except ValueError as exc:
        return _bad(str(exc))
    return JsonResponse({"last_seq": last})


@executor_view("POST")
def heartbeat(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    return JsonResponse({"cancel": services.record_heartbeat(job, rank)})


@executor_view("POST")
def status(request, job, rank):
    body = _json_body(request, rank)
    if isinstance(body, JsonResponse):
        return body
    try:
        services.record_worker_status(job, rank, body)
    except ValueError as exc:
        return _bad(str(exc))
    return JsonResponse({"ok": True})


@executor_view("PUT")
def artifact(request, job, rank, path: str):
    worker = request.headers.get("X-Gantry-Worker", str(rank))
    if worker != str(rank):
        return _bad(f"This token belongs to worker {rank}, not {worker!r}.")
    try:
        artifact, created = services.store_artifact(
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


urlpatterns = [
    path("jobs/<int:job_id>/spec", spec, name="executor-spec"),
    path("jobs/<int:job_id>/logs", logs, name="executor-logs"),
    path("jobs/<int:job_id>/metrics", metrics, name="executor-metrics"),
    path("jobs/<int:job_id>/heartbeat", heartbeat, name="executor-heartbeat"),
    path("jobs/<int:job_id>/status", status, name="executor-status"),
    path("jobs/<int:job_id>/artifacts/<path:path>", artifact, name="executor-artifact"),
]
