"""State changes for runtime images: register, resolve, update, delete, custom builds,
and what jobs ask of an image they run in (visible, of the project's tenant, its digest
now). Images never submits a job: jobs.services.submit does, with `image=`.

Registry failures become ValidationErrors with the registry's message, so pages
and the API answer 400 with a readable reason and nothing is half-written.
"""

from __future__ import annotations

import hashlib
import io
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from core import audit
from images.catalog import CATALOG
from images.models import (
    BuildState,
    Framework,
    ImageBuild,
    ImageVisibility,
    RuntimeImage,
)
from images.reference import InvalidReference, Reference, parse_reference
from images.registry import RegistryClient, RegistryError
from projects.permissions import can, require

EDITABLE = (
    "name",
    "framework",
    "framework_version",
    "cuda_version",
    "python_version",
    "description",
    "legacy",
    "local_env",
)
# One requirement per line: a distribution name, optional extras and version specifiers.
# Options (-e, --index-url, -r), URLs and paths are refused: pip runs on the Gantry host.
REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?\s*"
    r"((===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(,\s*(===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?$"
)
MAX_BUILD_FILE_BYTES = 50 * 1024 * 1024
FORBIDDEN_PREFIXES = ("/proc", "/sys", "/dev")


# --- the registry -----------------------------------------------------------------------


def registry_client() -> RegistryClient:
    return RegistryClient.from_settings()


def registry_host() -> str:
    """host[:port] of the configured registry ("" when none)."""
    url = settings.GANTRY_REGISTRY_URL
    return url.split("://", 1)[-1].split("/", 1)[0] if url else ""


def is_browsable(image: RuntimeImage) -> bool:
    """Gantry talks only to its configured registry (it holds credentials for no other)."""
    return bool(registry_host()) and image.registry == registry_host()


def parse(reference: str, field: str = "reference") -> Reference:
    try:
        return parse_reference(reference)
    except InvalidReference as exc:
        raise ValidationError({field: str(exc)}) from exc


def _registry_failure(exc: RegistryError, field: str = "reference") -> ValidationError:
    return ValidationError({field: str(exc)})


def registry_details(image: RuntimeImage) -> dict[str, Any]:
    """Live tags, manifest and labels for the image page; an error message instead of raising."""
    if not registry_host():
        return {"error": "No registry is configured (GANTRY_REGISTRY_URL), so tags are not shown."}
    if not is_browsable(image):
        return {
            "error": f"{image.registry} is not Gantry's registry ({registry_host()}); "
            "tags are browsed only there."
        }
    try:
        with registry_client() as client:
            tags = client.tags(image.repository)
            manifest = client.manifest(image.repository, image.digest or image.tag)
            config = (
                client.config(image.repository, manifest.digest) if not manifest.is_index else {}
            )
    except RegistryError as exc:
        return {"error": str(exc)}
    return {
        "tags": tags,
        "manifest": manifest,
        "labels": (config.get("config") or {}).get("Labels") or {},
        "platform": f"{config.get('os', '')}/{config.get('architecture', '')}".strip("/"),
    }


def visible_repositories(user) -> dict[str, Any]:
    """The registry's repositories this user may browse: those of images they can see and
    those under their tenants' namespaces (`<tenant slug>/…`)."""
    from accounts.models import Tenant

    if not registry_host():
        return {"error": "No registry is configured (GANTRY_REGISTRY_URL).", "repositories": []}
    try:
        with registry_client() as client:
            names = client.repositories()
    except RegistryError as exc:
        return {"error": str(exc), "repositories": []}
    host = registry_host()
    known = set(
        RuntimeImage.objects.visible_to(user)
        .filter(registry=host)
        .values_list("repository", flat=True)
    )
    if user.is_superuser:
        return {"repositories": names}
    slugs = set(Tenant.objects.visible_to(user).values_list("slug", flat=True))
    return {"repositories": [n for n in names if n in known or n.split("/", 1)[0] in slugs]}


# --- the catalog ------------------------------------------------------------------------


def seed_catalog() -> int:
    """Create the public catalog images that are missing (idempotent); returns how many."""
    created = 0
    for entry in CATALOG:
        ref = parse_reference(entry["reference"])
        _, made = RuntimeImage.objects.get_or_create(
            tenant=None,
            name=entry["name"],
            defaults={
                **{k: v for k, v in entry.items() if k != "name"},
                "visibility": ImageVisibility.PUBLIC,
                "registry": ref.registry,
                "repository": ref.repository,
                "tag": ref.tag,
                "digest": ref.digest,
            },
        )
        created += made
    return created


# --- images -----------------------------------------------------------------------------


def _check_fields(fields: dict[str, Any]) -> None:
    errors = {}
    if "framework" in fields and fields["framework"] not in Framework.values:
        errors["framework"] = f"Choose one of: {', '.join(Framework.values)}."
    for name in ("framework_version", "cuda_version", "python_version"):
        value = fields.get(name) or ""
        if value and not re.fullmatch(r"[0-9]+(\.[0-9]+){0,3}[A-Za-z0-9.+-]*", value):
            errors[name] = f"“{value}” is not a version like 3.11 or 12.4."
    if "name" in fields and not (fields["name"] or "").strip():
        errors["name"] = "Give the image a name."
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def create_image(
    actor, tenant, *, name: str, reference: str, resolve: bool = False, **fields
) -> RuntimeImage:
    """Register an image that exists in a registry; `tenant=None` makes it public (lab admins)."""
    if tenant is None:
        if not actor.is_superuser:
            raise PermissionDenied("Only lab administrators add public images.")
    else:
        require(actor, "image.create", tenant)
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError(f"Unknown image fields: {', '.join(sorted(unknown))}.")
    name = (name or "").strip()
    _check_fields({"name": name, **fields})
    ref = parse(reference)
    if RuntimeImage.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": f"There is already an image called “{name}”."})
    image = RuntimeImage(
        tenant=tenant,
        visibility=ImageVisibility.PUBLIC if tenant is None else ImageVisibility.TENANT,
        name=name,
        reference=str(ref),
        registry=ref.registry,
        repository=ref.repository,
        tag=ref.tag,
        digest=ref.digest,
        created_by=actor,
        **fields,
    )
    if resolve:
        _resolve_into(image)
    image.full_clean(validate_unique=False, validate_constraints=False)
    image.save()
    audit.record(actor, "image.create", image, tenant=tenant, reference=image.reference)
    return image


def _resolve_into(image: RuntimeImage) -> None:
    if not is_browsable(image):
        raise ValidationError(
            {
                "reference": f"{image.registry} is not Gantry's registry "
                f"({registry_host() or 'none configured'}): cannot resolve the tag there."
            }
        )
    try:
        with registry_client() as client:
            digest = client.resolve(image.repository, image.tag) if image.tag else image.digest
            labels = client.labels(image.repository, digest)
    except RegistryError as exc:
        raise _registry_failure(exc) from exc
    image.digest = digest
    image.labels = labels
    image.resolved_at = timezone.now()


@transaction.atomic
def resolve_image(actor, image: RuntimeImage) -> RuntimeImage:
    """Look the tag up in the registry again and pin the digest it points at now."""
    require(actor, "image.change", image)
    before = image.digest
    _resolve_into(image)
    image.save(update_fields=["digest", "labels", "resolved_at"])
    audit.record(actor, "image.resolve", image, before=before, digest=image.digest)
    return image


@transaction.atomic
def update_image(actor, image: RuntimeImage, **fields) -> RuntimeImage:
    require(actor, "image.change", image)
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError(f"Unknown image fields: {', '.join(sorted(unknown))}.")
    _check_fields(fields)
    name = (fields.get("name") or image.name).strip()
    if RuntimeImage.objects.filter(tenant=image.tenant, name=name).exclude(pk=image.pk).exists():
        raise ValidationError({"name": f"There is already an image called “{name}”."})
    for key, value in fields.items():
        setattr(image, key, value.strip() if isinstance(value, str) else value)
    image.full_clean(validate_unique=False, validate_constraints=False)
    image.save()
    audit.record(actor, "image.change", image, fields=sorted(fields))
    return image


@transaction.atomic
def delete_image(actor, image: RuntimeImage, *, from_registry: bool = False) -> None:
    """Forget an image; with `from_registry`, also delete its manifest (by digest)."""
    require(actor, "image.delete", image)
    if (
        ImageBuild.objects.filter(base=image)
        .exclude(state__in=[BuildState.SUCCEEDED, BuildState.FAILED])
        .exists()
    ):
        raise ValidationError("A build on top of this image is still running.")
    if from_registry:
        if not image.digest:
            raise ValidationError("The image has no resolved digest to delete; resolve it first.")
        if not is_browsable(image):
            raise ValidationError(f"{image.registry} is not Gantry's registry.")
        try:
            with registry_client() as client:
                client.delete_manifest(image.repository, image.digest)
        except RegistryError as exc:
            raise ValidationError(str(exc)) from exc
    audit.record(
        actor, "image.delete", image, reference=image.pinned_reference, from_registry=from_registry
    )
    image.delete()


# --- what a job may run in (jobs asks; images never submits one) -----------------------


def images_for_job(user, project):
    """The images a job in `project` may run in: public ones, and `project`'s tenant's ones
    that `user` can see (never another tenant's, even for someone in both)."""
    from django.db.models import Q

    return RuntimeImage.objects.visible_to(user).filter(
        Q(tenant__isnull=True) | Q(tenant_id=project.tenant_id)
    )


def resolve_for_job(image: RuntimeImage) -> str:
    """The digest a job submitted now runs with.

    An image in Gantry's registry is resolved again (its tag may have moved); a
    failure (registry unreachable, tag gone, credentials refused) is an `image`
    field error, so nothing is submitted with a digest that may be stale. An image
    elsewhere keeps the digest it was registered with (possibly none).
    """
    if not (is_browsable(image) and image.tag):
        return image.digest
    try:
        with registry_client() as client:
            return client.resolve(image.repository, image.tag)
    except RegistryError as exc:
        raise ValidationError(
            {"image": f"Cannot resolve {image.reference} in the registry: {exc}"}
        ) from exc


def check_image_for_project(actor, project, image: RuntimeImage) -> None:
    """Refuse (ValidationError on `image`) an image that `actor` may not run in `project`:
    one they cannot see (answered as missing) or another tenant's."""
    if not can(actor, "image.view", image):
        raise ValidationError({"image": "No such image."})
    if image.tenant_id is not None and image.tenant_id != project.tenant_id:
        raise ValidationError(
            {
                "image": f"“{image.name}” belongs to another tenant; pick a public image or one of "
                f"{project.tenant}'s."
            }
        )


# --- custom builds ----------------------------------------------------------------------


def _clean_image_path(path: str) -> str:
    path = (path or "").strip()
    if not path.startswith("/"):
        raise ValidationError({"files": f"“{path}”: give an absolute path inside the image."})
    parts = [p for p in path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts) or "\x00" in path or "\\" in path:
        raise ValidationError({"files": f"“{path}” is not a usable path inside the image."})
    clean = "/" + "/".join(parts)
    if clean.startswith(FORBIDDEN_PREFIXES):
        raise ValidationError({"files": f"“{clean}”: /proc, /sys and /dev belong to the runtime."})
    return clean


def clean_requirements(text: str) -> list[str]:
    lines = []
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not REQUIREMENT.match(line):
            raise ValidationError(
                {
                    "requirements": f"Line {number}: “{line}” is not a package requirement "
                    "(name[extras] and version specifiers only; no options, URLs or paths)."
                }
            )
        lines.append(line)
    return lines


def _size_of(upload) -> int:
    size = getattr(upload, "size", None)
    if size is None:
        size = upload.seek(0, io.SEEK_END)
        upload.seek(0)
    return size


@transaction.atomic
def start_build(
    actor,
    base: RuntimeImage,
    tenant,
    *,
    name: str,
    tag: str = "",
    requirements: str = "",
    files: list[tuple[str, Any]] | None = None,
) -> ImageBuild:
    """Queue a custom image: `base` plus `files` ([(path in image, file object)]) and
    pure-Python `requirements`, pushed to `<registry>/<tenant slug>/<name>:<tag>`."""
    require(actor, "image.create", tenant)
    if not can(actor, "image.view", base):
        raise ValidationError({"base": "No such image."})
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the new image a name."})
    if RuntimeImage.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": f"There is already an image called “{name}”."})
    if not is_browsable(base):
        raise ValidationError(
            {
                "base": f"The base image must be in Gantry's registry "
                f"({registry_host() or 'none configured'}), not {base.registry}."
            }
        )
    packages = clean_requirements(requirements)
    if packages and not base.python_version:
        raise ValidationError(
            {"requirements": "The base image does not say its Python version; set it first."}
        )
    files = files or []
    if not packages and not files:
        raise ValidationError("Add at least one file or one package to the base image.")
    tag = (tag or "").strip() or timezone.now().strftime("%Y%m%d-%H%M%S")
    repository = f"{tenant.slug}/{slugify(name) or 'image'}"
    target = parse(f"{registry_host()}/{repository}:{tag}", "tag")
    seen = set()
    cleaned = []
    for path, upload in files:
        clean = _clean_image_path(path)
        if clean in seen:
            raise ValidationError({"files": f"{clean} is given twice."})
        # Every file is checked before any is stored: a refusal leaves nothing behind.
        if _size_of(upload) > MAX_BUILD_FILE_BYTES:
            raise ValidationError({"files": f"{clean} is larger than 50 MB."})
        seen.add(clean)
        cleaned.append(clean)
    build = ImageBuild.objects.create(
        tenant=tenant,
        base=base,
        name=name,
        target=str(target),
        requirements="\n".join(packages),
        created_by=actor,
    )
    stored = []
    for clean, (_, upload) in zip(cleaned, files, strict=True):
        data = upload.read()
        saved = default_storage.save(f"images/builds/{build.pk}/{len(stored)}", ContentFile(data))
        stored.append(
            {
                "path": clean,
                "storage": saved,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    build.files = stored
    build.save(update_fields=["files"])
    audit.record(actor, "image.build", build, tenant=tenant, base=base.pinned_reference)
    from images.tasks import queue_build

    transaction.on_commit(lambda: queue_build(build.pk))
    return build


def record_built_image(build: ImageBuild, digest: str, labels: dict) -> RuntimeImage:
    """The build's result as a tenant image (called by the build task)."""
    ref = parse_reference(build.target)
    base = build.base
    image = RuntimeImage.objects.create(
        tenant=build.tenant,
        visibility=ImageVisibility.TENANT,
        name=build.name,
        reference=str(ref),
        registry=ref.registry,
        repository=ref.repository,
        tag=ref.tag,
        digest=digest,
        resolved_at=timezone.now(),
        framework=base.framework,
        framework_version=base.framework_version,
        cuda_version=base.cuda_version,
        python_version=base.python_version,
        description=f"Built by Gantry on top of {base.name}.",
        labels=labels,
        built_from=base,
        created_by=build.created_by,
    )
    audit.record(build.created_by, "image.create", image, tenant=build.tenant, build=build.pk)
    return image


# --- A build's run (images.tasks.run_build is the only caller) ---------------------------
MAX_BUILD_LOG_CHARS = 200_000


def claim_build(build_id: int) -> ImageBuild | None:
    """Queued -> running, once: None when the build is not (or no longer) queued."""
    claimed = ImageBuild.objects.filter(pk=build_id, state=BuildState.QUEUED).update(
        state=BuildState.RUNNING, started_at=timezone.now(), step="starting"
    )
    if not claimed:
        return None
    return ImageBuild.objects.select_related("base", "tenant", "created_by").get(pk=build_id)


def record_build_log(build: ImageBuild, text: str) -> None:
    """The build's log so far (its last MAX_BUILD_LOG_CHARS characters)."""
    ImageBuild.objects.filter(pk=build.pk).update(log=text[-MAX_BUILD_LOG_CHARS:])


def record_build_progress(build: ImageBuild, percent: int, step: str) -> None:
    ImageBuild.objects.filter(pk=build.pk).update(progress=percent, step=step)


def finish_build(build: ImageBuild, digest: str, labels: dict) -> RuntimeImage:
    """The build succeeded: its image exists and the build points at it, in one transaction."""
    with transaction.atomic():
        image = record_built_image(build, digest, labels)
        ImageBuild.objects.filter(pk=build.pk).update(
            state=BuildState.SUCCEEDED,
            progress=100,
            step="done",
            result=image,
            finished_at=timezone.now(),
        )
    return image


def fail_build(build: ImageBuild, message: str) -> None:
    """The build failed with `message` (the reason its page shows), audited."""
    ImageBuild.objects.filter(pk=build.pk).update(
        state=BuildState.FAILED, error=message[:1000], finished_at=timezone.now()
    )
    audit.record(None, "image.build_failed", build, tenant=build.tenant, error=message[:200])
