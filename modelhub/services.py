"""State changes for the model hub: models, versions (from a job or an upload), aliases,
and prediction jobs. Views, the API and the admin call these; none writes models directly.

Version files are copied into `models/<model>/<version>/` so a version stays whole
when its job's outputs are cleaned up. Files written before a failure are removed
again, so a refused registration leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from contextlib import contextmanager, suppress
from typing import Any

from django.core.exceptions import ValidationError
from django.core.files.base import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Max, OuterRef, Subquery
from django.urls import reverse
from django.utils import timezone

from core import audit, registry
from core.names import check_segments, normal_name
from modelhub.formats import UnknownFormat, detect_format
from modelhub.models import Alias, AliasMove, ModelFile, ModelVersion, RegisteredModel
from projects.permissions import require

ALIAS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
TAG = re.compile(r"^[\w.:-]{1,64}$")
MAX_TAGS = 20
MODEL_MOUNT = "model"


def _clean_tags(tags) -> list[str]:
    if tags in (None, ""):
        return []
    if isinstance(tags, str):
        tags = [t.strip() for t in tags.split(",")]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValidationError({"tags": "Tags are a list of words."})
    tags = [t.strip() for t in tags if t.strip()]
    bad = [t for t in tags if not TAG.match(t)]
    if bad:
        raise ValidationError(
            {"tags": f"“{bad[0]}” is not a tag (letters, digits, . _ : -, at most 64)."}
        )
    if len(tags) > MAX_TAGS:
        raise ValidationError({"tags": f"At most {MAX_TAGS} tags."})
    return list(dict.fromkeys(tags))


def _clean_path(path: str) -> str:
    path = normal_name(path or "").replace("\\", "/").strip()
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\x00" in path
        or any(p in ("", ".", "..") for p in parts)
        or len(path) > 900
    ):
        raise ValidationError({"files": f"“{path}” is not a usable relative file name."})
    try:
        check_segments(path, f"“{path}”")
    except ValidationError as error:
        raise ValidationError({"files": error.messages}) from None
    return path


# --- models -----------------------------------------------------------------------------


@transaction.atomic
def create_model(
    actor, project, *, name: str, description: str = "", card: str = "", tags=None
) -> RegisteredModel:
    require(actor, "model.register", project)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the model a name."})
    if RegisteredModel.objects.filter(project=project, name=name).exists():
        raise ValidationError({"name": f"{project} already has a model called “{name}”."})
    model = RegisteredModel(
        project=project,
        name=name,
        description=description or "",
        card=card or "",
        tags=_clean_tags(tags),
        created_by=actor,
    )
    model.full_clean(validate_unique=False, validate_constraints=False)
    model.save()
    audit.record(actor, "model.create", model)
    return model


@transaction.atomic
def update_model(actor, model: RegisteredModel, **fields) -> RegisteredModel:
    require(actor, "model.register", model)
    unknown = set(fields) - {"name", "description", "card", "tags"}
    if unknown:
        raise ValidationError(f"Unknown model fields: {', '.join(sorted(unknown))}.")
    if "tags" in fields:
        fields["tags"] = _clean_tags(fields["tags"])
    if "name" in fields:
        fields["name"] = (fields["name"] or "").strip()
        if not fields["name"]:
            raise ValidationError({"name": "Give the model a name."})
        taken = RegisteredModel.objects.filter(project=model.project, name=fields["name"])
        if taken.exclude(pk=model.pk).exists():
            raise ValidationError({"name": f"There is already a model called “{fields['name']}”."})
    for key, value in fields.items():
        setattr(model, key, value if value is not None else "")
    model.updated_at = timezone.now()
    model.full_clean(validate_unique=False, validate_constraints=False)
    model.save()
    audit.record(actor, "model.change", model, fields=sorted(fields))
    return model


def delete_model(actor, model: RegisteredModel) -> None:
    require(actor, "model.delete", model)
    names = list(ModelFile.objects.filter(version__model=model).values_list("file", flat=True))
    with transaction.atomic():
        audit.record(actor, "model.delete", model, versions=model.versions.count())
        registry.before_cascade(RegisteredModel.objects.filter(pk=model.pk))
        model.delete()
    transaction.on_commit(lambda: _delete_stored(names))


def _delete_stored(names: list[str]) -> None:
    for name in names:
        with suppress(OSError):
            default_storage.delete(name)


# --- versions ---------------------------------------------------------------------------


def last_metrics(job) -> dict[str, float | None]:
    """The last value the job reported for each metric (worker 0, highest seq)."""
    from jobs.models import MetricPoint

    points = MetricPoint.objects.filter(job=job, worker=0)
    latest = points.filter(name=OuterRef("name")).order_by("-seq").values("seq")[:1]
    return dict(points.filter(seq=Subquery(latest)).order_by("name").values_list("name", "value"))


def _store_version(actor, model, files, **fields) -> ModelVersion:
    """Create the next version of `model` from [(path, File)]; runs inside a transaction."""
    openers = {path: (lambda f=f: _peek(f)) for path, f in files}
    try:
        fmt, primary = detect_format(openers)
    except UnknownFormat as exc:
        raise ValidationError({"files": str(exc)}) from exc
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    number = (locked.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = ModelVersion.objects.create(
        model=locked, number=number, format=fmt, primary_file=primary, created_by=actor, **fields
    )
    saved: list[str] = []
    try:
        total = 0
        rows = []
        for path, source in files:
            handle = _reopen(source)
            digest = hashlib.sha256()
            size = 0
            for chunk in iter(lambda h=handle: h.read(1024 * 1024), b""):
                digest.update(chunk)
                size += len(chunk)
            handle.seek(0)
            name = default_storage.save(
                f"models/{model.pk}/{version.pk}/{path}", File(handle, name=path)
            )
            saved.append(name)
            rows.append(
                ModelFile(
                    version=version, path=path, size=size, sha256=digest.hexdigest(), file=name
                )
            )
            total += size
        ModelFile.objects.bulk_create(rows)
        version.size = total
        version.save(update_fields=["size"])
        RegisteredModel.objects.filter(pk=model.pk).update(updated_at=timezone.now())
    except BaseException:
        _delete_stored(saved)
        raise
    return version


@contextmanager
def _peek(source):
    """Read the start of a file for format detection, leaving it open and rewound."""
    handle = _reopen(source)
    try:
        yield handle
    finally:
        handle.seek(0)


def _reopen(source):
    """A readable, rewound handle on an uploaded file or a stored FieldFile."""
    if hasattr(source, "open") and getattr(source, "closed", False):
        source.open("rb")
    source.seek(0)
    return source


@transaction.atomic
def register_version_from_job(
    actor,
    job,
    *,
    model: RegisteredModel | None = None,
    model_name: str = "",
    paths: list[str] | None = None,
    description: str = "",
    tags=None,
) -> ModelVersion:
    """One call: the job's output files become the next version of `model` (or of the
    model called `model_name` in the job's project, created if missing), with the job's
    last metrics and its lineage (parameters, image digest, inputs)."""
    from jobs.states import JobState

    require(actor, "model.register", job)
    if job.state != JobState.SUCCEEDED:
        raise ValidationError(
            f"Job #{job.pk} has not succeeded ({job.get_state_display().lower()}); "
            "register models from jobs that finished well."
        )
    if model is None:
        model_name = (model_name or "").strip()
        if not model_name:
            raise ValidationError({"model": "Choose a model or give a name for a new one."})
        model = RegisteredModel.objects.filter(project=job.project, name=model_name).first()
        if model is None:
            model = create_model(actor, job.project, name=model_name)
    if model.project_id != job.project_id:
        raise ValidationError({"model": "The model and the job are in different projects."})
    require(actor, "model.register", model)
    artifacts = list(job.artifacts.filter(worker=0).order_by("path"))
    if paths:
        wanted = set(paths)
        missing = wanted - {a.path for a in artifacts}
        if missing:
            raise ValidationError({"paths": f"Job #{job.pk} has no output {sorted(missing)[0]}."})
        artifacts = [a for a in artifacts if a.path in wanted]
    if not artifacts:
        raise ValidationError(f"Job #{job.pk} has no output files to register.")
    record = getattr(job, "image_record", None) if _has_image_record(job) else None
    version = _store_version(
        actor,
        model,
        [(a.path, a.file) for a in artifacts],
        description=description or "",
        tags=_clean_tags(tags),
        metrics=last_metrics(job),
        source_job=job,
        parameters=job.parameters,
        image_reference=record.reference if record else "",
        image_digest=record.digest if record else "",
        inputs=job.inputs,
    )
    audit.record(actor, "model.register", version, tenant=model.tenant, job=job.pk)
    return version


def _has_image_record(job) -> bool:
    from jobs.models import JobImage

    return JobImage.objects.filter(job=job).exists()


@transaction.atomic
def upload_version(
    actor, model: RegisteredModel, files: list, *, description: str = "", tags=None
) -> ModelVersion:
    """A version from uploaded files ([(relative path, file object)]); no job lineage."""
    require(actor, "model.register", model)
    if not files:
        raise ValidationError({"files": "Upload at least one file."})
    cleaned = []
    seen = set()
    for path, upload in files:
        path = _clean_path(path)
        if path in seen:
            raise ValidationError({"files": f"{path} is given twice."})
        seen.add(path)
        cleaned.append((path, upload))
    version = _store_version(
        actor, model, cleaned, description=description or "", tags=_clean_tags(tags)
    )
    audit.record(actor, "model.register", version, tenant=model.tenant, upload=True)
    return version


# --- aliases ----------------------------------------------------------------------------


def _version_of(model: RegisteredModel, version) -> ModelVersion:
    if isinstance(version, ModelVersion):
        if version.model_id != model.pk:
            raise ValidationError({"version": f"That version is not a version of {model}."})
        return version
    try:
        number = int(str(version).lstrip("vV"))
    except (TypeError, ValueError):
        raise ValidationError({"version": f"“{version}” is not a version number."}) from None
    found = ModelVersion.objects.filter(model=model, number=number).first()
    if found is None:
        raise ValidationError({"version": f"{model} has no version {number}."})
    return found


@transaction.atomic
def set_alias(actor, model: RegisteredModel, name: str, version) -> Alias:
    """Point alias `name` at `version` (a ModelVersion or its number); the move is recorded."""
    require(actor, "model.alias", model)
    name = (name or "").strip().lower()
    if not ALIAS_NAME.match(name):
        raise ValidationError(
            {"name": "An alias is lowercase letters, digits, _ and -, starting with a letter."}
        )
    target = _version_of(model, version)
    alias = Alias.objects.select_for_update().filter(model=model, name=name).first()
    before = alias.version if alias else None
    if alias is None:
        alias = Alias.objects.create(model=model, name=name, version=target, updated_by=actor)
    elif alias.version_id != target.pk:
        alias.version = target
        alias.updated_by = actor
        alias.updated_at = timezone.now()
        alias.save(update_fields=["version", "updated_by", "updated_at"])
    else:
        return alias
    AliasMove.objects.create(
        model=model, alias=name, from_version=before, to_version=target, actor=actor
    )
    audit.record(
        actor,
        "model.alias",
        model,
        alias=name,
        from_version=before.number if before else None,
        to_version=target.number,
    )
    return alias


@transaction.atomic
def remove_alias(actor, model: RegisteredModel, name: str) -> None:
    require(actor, "model.alias", model)
    alias = Alias.objects.select_for_update().filter(model=model, name=name).first()
    if alias is None:
        raise ValidationError({"name": f"{model} has no alias “{name}”."})
    AliasMove.objects.create(model=model, alias=name, from_version=alias.version, actor=actor)
    audit.record(actor, "model.alias", model, alias=name, from_version=alias.version.number)
    alias.delete()


# --- reading ----------------------------------------------------------------------------


def compare_versions(a: ModelVersion, b: ModelVersion) -> dict[str, list[dict[str, Any]]]:
    """Metrics and parameters of two versions side by side (rows: name, a, b, same)."""

    def rows(left: dict, right: dict) -> list[dict[str, Any]]:
        return [
            {
                "name": key,
                "a": left.get(key),
                "b": right.get(key),
                "same": left.get(key) == right.get(key),
            }
            for key in sorted(set(left) | set(right))
        ]

    return {
        "metrics": rows(a.metrics or {}, b.metrics or {}),
        "parameters": rows(a.parameters or {}, b.parameters or {}),
    }


def pick_versions(model: RegisteredModel, a=None, b=None):
    """The two versions to compare: the given numbers, or by default the one before the
    latest and the latest. (None, None) for a model without versions."""
    latest = list(model.versions.order_by("-number")[:2])
    if not latest:
        return None, None
    first = _version_of(model, a) if a not in (None, "") else latest[-1]
    second = _version_of(model, b) if b not in (None, "") else latest[0]
    return first, second


def lineage(version: ModelVersion) -> dict[str, Any]:
    """Inputs (dataset versions, as the job was given them) → job → this version."""
    inputs = []
    for entry in version.inputs or []:
        if not isinstance(entry, dict):
            continue
        files = entry.get("files") or []
        inputs.append(
            {
                "label": entry.get("dataset") or entry.get("name") or entry.get("mount") or "input",
                "version": entry.get("version") or entry.get("dataset_version") or "",
                "mount": entry.get("mount", ""),
                "files": len(files) if isinstance(files, list) else 0,
            }
        )
    return {
        "inputs": inputs,
        "job": version.source_job,
        "job_id": version.source_job_id,
        "image": version.image_reference,
        "digest": version.image_digest,
    }


# --- prediction -------------------------------------------------------------------------


def model_input_choices(user, project):
    """The model versions of `project` the job form offers as an input, by name and newest
    first (`core.registry.model_input_choices`)."""
    return (
        ModelVersion.objects.visible_to(user)
        .filter(model__project=project)
        .select_related("model")
        .order_by("model__name", "-number")
    )


def model_version_of_input(project, entry: dict) -> int | None:
    """The pk of the project's model version a job input entry names, or None (the job
    form's clone keeps the pick: `core.registry.model_version_of_input`)."""
    return (
        ModelVersion.objects.filter(
            model__project=project, model_id=entry.get("model"), number=entry.get("model_version")
        )
        .values_list("pk", flat=True)
        .first()
    )


def model_inputs(version: ModelVersion) -> dict[str, Any]:
    """A job input entry staging the version's files under `model/` (executor/staging.py);
    the URLs answer the job's own token (the agent API, jobs/executor_api.py)."""
    return {
        "mount": MODEL_MOUNT,
        "model": version.model_id,
        "model_version": version.number,
        "files": [
            {
                "path": f.path,
                "url": reverse("executor-model-file", args=[f.pk]),
                "size": f.size,
                "sha256": f.sha256,
            }
            for f in version.files.all()
        ],
    }


def model_file_for_job(job, pk: int) -> ModelFile | None:
    """The model file a job's token may stage: only files of model versions in the job's
    own project (anything else is None, answered like a file that does not exist)."""
    return (
        ModelFile.objects.select_related("version__model")
        .filter(pk=pk, version__model__project_id=job.project_id)
        .first()
    )


def predict(
    actor,
    version: ModelVersion,
    *,
    command: str,
    inputs: list | None = None,
    parameters: dict | None = None,
    image=None,
    **spec,
):
    """Submit a prediction job with the version's files staged under `model/`.

    `inputs` adds dataset versions (job input entries as the datasets app gives them);
    parameter `model` defaults to the staged primary file, as examples/predict_digits.py
    expects.
    """
    from jobs.services.submit import submit_job

    require(actor, "job.submit", version.model.project)
    if inputs is not None and not isinstance(inputs, list):
        raise ValidationError({"inputs": "Inputs must be a list."})
    if parameters is not None and not isinstance(parameters, dict):
        raise ValidationError({"parameters": "Parameters must be a mapping of name to value."})
    parameters = dict(parameters or {})
    if version.primary_file:
        parameters.setdefault("model", posixpath.join(MODEL_MOUNT, version.primary_file))
    spec.setdefault("name", f"predict with {version}")
    spec.update(
        command=command, parameters=parameters, inputs=[model_inputs(version), *(inputs or [])]
    )
    with transaction.atomic():
        job = submit_job(actor, version.model.project, image=image, **spec)
        audit.record(actor, "model.predict", version, tenant=version.tenant, job=job.pk)
    return job
