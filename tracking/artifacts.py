"""MLflow's artifact proxy (`/api/2.0/mlflow-artifacts/artifacts/…`) onto Gantry's storage.

A run's artifact URI is `mlflow-artifacts:/<experiment>/<run>/artifacts`, a logged
model's `mlflow-artifacts:/<experiment>/models/<model>/artifacts`; the client turns
either into these routes. The files go through Django's storage API (the filesystem by
default, S3 / Ceph RGW in production) under `mlflow-artifacts/`, and every request is
checked against the run's (or model's) project like the rest of the API.
"""

from __future__ import annotations

import posixpath
import tempfile

from django.core.files import File
from django.core.files.storage import default_storage
from django.http import FileResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from tracking.api.protocol import caller_for_request
from tracking.errors import MlflowError, invalid, not_found
from tracking.services.access import get_run
from tracking.services.logged_models import get_logged_model

PREFIX = "mlflow-artifacts"
CHUNK = 1 << 20


def _safe(path: str) -> str:
    path = (path or "").strip("/")
    # "." is the folder itself (download_artifacts(artifact_path=".") lists it so).
    parts = [p for p in path.split("/") if p != "."] if path else []
    if any(p in ("", "..") for p in parts) or "\\" in path or "\x00" in path:
        raise invalid(f"Invalid artifact path: '{path}'.")
    return "/".join(parts)


def _owner(caller, path: str, action: str):
    """The run or logged model a path lies under (checked for `action`), and the path's
    part inside its artifacts."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[2] == "artifacts":
        owner = get_run(caller, parts[1], action)
        inner = parts[3:]
    elif len(parts) >= 4 and parts[1] == "models" and parts[3] == "artifacts":
        owner = get_logged_model(caller, parts[2], action)
        inner = parts[4:]
    else:
        raise not_found(f"No run or logged model holds artifacts at '{path}'.")
    if str(owner.experiment_id) != parts[0]:
        raise not_found(f"No run or logged model holds artifacts at '{path}'.")
    if action != "experiment.view" and getattr(owner, "lifecycle_stage", "active") != "active":
        raise invalid(f"'{path}' belongs to a deleted run.")
    return owner, "/".join(inner)


def _registry_version(caller, path: str):
    """`registry/<version id>/…`: a model hub version's files (get-download-uri's answer),
    read-only, for whoever may view the model."""
    from modelhub.models import ModelVersion

    parts = path.split("/")
    version = None
    if len(parts) >= 2 and parts[1].isdigit() and len(parts[1]) < 19:
        version = (
            ModelVersion.objects.visible_to(caller.user)
            .select_related("model__project__tenant")
            .filter(pk=int(parts[1]))
            .first()
        )
    if version is None or not caller.can("model.view", version):
        raise not_found(f"Artifact '{path}' does not exist.")
    return version, "/".join(parts[2:])


def _registry_listing(version, inner: str) -> list[dict]:
    prefix = f"{inner}/" if inner else ""
    dirs, files = set(), []
    for file_path, size in version.files.values_list("path", "size"):
        if not file_path.startswith(prefix):
            continue
        rest = file_path[len(prefix) :]
        head, sep, _ = rest.partition("/")
        if sep:
            dirs.add(head)
        else:
            files.append({"path": rest, "is_dir": False, "file_size": size})
    return [{"path": d, "is_dir": True} for d in sorted(dirs)] + sorted(
        files, key=lambda f: f["path"]
    )


def _name(path: str) -> str:
    return f"{PREFIX}/{path}"


@csrf_exempt
def artifact(request, path: str):
    try:
        caller = caller_for_request(request)
        path = _safe(path)
        if path.startswith("registry/"):
            if request.method != "GET":
                raise MlflowError("Registered versions are read-only here.", "PERMISSION_DENIED")
            version, inner = _registry_version(caller, path)
            found = version.files.filter(path=inner).first()
            if found is None:
                raise not_found(f"Artifact '{path}' does not exist.")
            return FileResponse(found.file.open("rb"), content_type="application/octet-stream")
        if request.method == "GET":
            _owner(caller, path, "experiment.view")
            if not path or not default_storage.exists(_name(path)):
                raise not_found(f"Artifact '{path}' does not exist.")
            return FileResponse(
                default_storage.open(_name(path), "rb"),
                as_attachment=False,
                content_type="application/octet-stream",
            )
        if request.method == "PUT":
            _, inner = _owner(caller, path, "experiment.log")
            if not inner:
                raise invalid("Name the artifact's file.")
            with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as buffer:
                while chunk := request.read(CHUNK):
                    buffer.write(chunk)
                buffer.seek(0)
                if default_storage.exists(_name(path)):
                    default_storage.delete(_name(path))
                default_storage.save(_name(path), File(buffer, name=posixpath.basename(path)))
            return JsonResponse({})
        if request.method == "DELETE":
            _owner(caller, path, "experiment.log")
            _delete_tree(_name(path))
            return JsonResponse({})
        raise MlflowError(
            f"Artifacts take GET, PUT or DELETE, not {request.method}.", "ENDPOINT_NOT_FOUND"
        )
    except MlflowError as exc:
        return exc.response()


def _delete_tree(name: str) -> None:
    if default_storage.exists(name):
        try:
            dirs, files = default_storage.listdir(name)
        except (NotADirectoryError, FileNotFoundError, OSError):
            dirs, files = [], []
        if not dirs and not files:
            default_storage.delete(name)
            return
    else:
        dirs, files = _listdir(name)
    for file_name in files:
        default_storage.delete(f"{name}/{file_name}")
    for directory in dirs:
        _delete_tree(f"{name}/{directory}")


def _listdir(name: str) -> tuple[list[str], list[str]]:
    try:
        return default_storage.listdir(name)
    except (FileNotFoundError, NotADirectoryError):
        return [], []


@csrf_exempt
def artifact_list(request):
    try:
        if request.method != "GET":
            raise MlflowError("Listing artifacts takes GET.", "ENDPOINT_NOT_FOUND")
        caller = caller_for_request(request)
        path = _safe(request.GET.get("path", ""))
        if path.startswith("registry/"):
            version, inner = _registry_version(caller, path)
            return JsonResponse({"files": _registry_listing(version, inner)})
        _owner(caller, path, "experiment.view")
        dirs, files = _listdir(_name(path))
        listing = [{"path": d, "is_dir": True} for d in sorted(dirs)]
        listing += [
            {"path": f, "is_dir": False, "file_size": default_storage.size(f"{_name(path)}/{f}")}
            for f in sorted(files)
        ]
        return JsonResponse({"files": listing})
    except MlflowError as exc:
        return exc.response()
