"""State changes for endpoints: create, change, delete, endpoint tokens. Views, the API,
the CLI (through the API) and the admin call these; none writes the models directly.

What an endpoint serves is resolved here too (`wanted_versions`): the alias's version
now, or the fixed one. The gateway compares it with what answers (`serving_version`)
and rolls to it (endpoints/rollout.py).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from accounts.models import Tenant
from core import audit, registry
from endpoints import admissions
from endpoints.models import Endpoint, EndpointToken
from jobs.services.holdings import holdings_by_tenant
from modelhub.models import Alias, ModelVersion, RegisteredModel
from projects.models import Project
from projects.permissions import require

FIELDS = ("alias", "version", "canary_alias", "canary_percent", "replicas", "cpus")
FIELDS += ("memory_mb", "gpus", "idle_seconds", "rate_limit")
LIMITS = {
    "canary_percent": (0, 100),
    "replicas": (1, 16),
    "cpus": (1, 64),
    "memory_mb": (128, 1024 * 1024),
    "gpus": (0, 16),
    "idle_seconds": (0, 30 * 24 * 3600),
    "rate_limit": (0, 1_000_000),
}


def _int_field(name: str, value) -> int:
    low, high = LIMITS[name]
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValidationError({name: f"“{value}” is not a whole number."}) from None
    if isinstance(value, float) and value != number or not low <= number <= high:
        raise ValidationError({name: f"Give a whole number from {low} to {high}."})
    return number


def _version(model: RegisteredModel, value) -> ModelVersion:
    if isinstance(value, ModelVersion):
        if value.model_id != model.pk:
            raise ValidationError({"version": f"That version is not a version of {model}."})
        return value
    try:
        number = int(str(value).lstrip("vV"))
    except (TypeError, ValueError):
        raise ValidationError({"version": f"“{value}” is not a version number."}) from None
    found = ModelVersion.objects.filter(model=model, number=number).first()
    if found is None:
        raise ValidationError({"version": f"{model} has no version {number}."})
    return found


def _alias(model: RegisteredModel, name: str, field: str) -> Alias:
    found = Alias.objects.filter(model=model, name=(name or "").strip().lower()).first()
    if found is None:
        known = ", ".join(model.aliases.values_list("name", flat=True)) or "none yet"
        raise ValidationError({field: f"{model} has no alias “{name}” (its aliases: {known})."})
    return found


def _check_servable(version: ModelVersion, field: str, backend: str) -> None:
    from endpoints.local import model_file_in

    try:
        model_file_in(version, backend)
    except ValueError as exc:
        raise ValidationError({field: str(exc)}) from None


def _clean(endpoint: Endpoint, fields: dict[str, Any]) -> list[str]:
    """Apply `fields` to `endpoint` after checking each; the names changed."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValidationError({unknown[0]: "Not a field of an endpoint that can be set."})
    for name in LIMITS:
        if name in fields and fields[name] is not None:
            setattr(endpoint, name, _int_field(name, fields[name]))
    model = endpoint.model
    if "alias" in fields or "version" in fields:
        alias, version = (fields.get("alias") or "").strip().lower(), fields.get("version")
        if bool(alias) == (version not in (None, "")):
            raise ValidationError({"alias": "Give an alias to follow or a version, not both."})
        endpoint.alias = alias
        endpoint.version = _version(model, version) if not alias else None
        _check_servable(
            _alias(model, alias, "alias").version if alias else endpoint.version,
            "alias" if alias else "version",
            endpoint.backend,
        )
    if "canary_alias" in fields:
        endpoint.canary_alias = (fields.get("canary_alias") or "").strip().lower()
        if endpoint.canary_alias:
            _check_servable(
                _alias(model, endpoint.canary_alias, "canary_alias").version,
                "canary_alias",
                endpoint.backend,
            )
    if endpoint.canary_alias and not endpoint.canary_percent:
        raise ValidationError({"canary_percent": "Give the canary's share of requests (1-100)."})
    if endpoint.canary_percent and not endpoint.canary_alias:
        raise ValidationError({"canary_alias": "A canary share needs a canary alias."})
    if endpoint.gpus and endpoint.backend == "local":
        raise ValidationError(
            {"gpus": "Endpoints on the local backend run on CPUs; GPU endpoints need Kubernetes."}
        )
    return [name for name in FIELDS if name in fields] + (["version"] if "alias" in fields else [])


# What a replica holds, by the field that sets it: (field, holdings key, unit in words).
RESOURCES = (("gpus", "gpus", "GPU"), ("cpus", "cpus", "CPU"), ("memory_mb", "memory_mb", "MiB"))
SIZING = ("replicas", "cpus", "memory_mb", "gpus", "canary_alias", "canary_percent")


def replicas_wanted(endpoint: Endpoint) -> int:
    """The replicas the endpoint runs when it is up: its replicas for the primary and as
    many again for a canary (each version has its own)."""
    return endpoint.replicas * (2 if endpoint.canary_alias else 1)


def _unit(n: int, unit: str) -> str:
    return f"{n} {unit}" if unit == "MiB" or n == 1 else f"{n} {unit}s"


def check_quota(endpoint: Endpoint, held_now: dict[str, int], changed: list[str]) -> None:
    """Refuse (ValidationError) an endpoint whose replicas, when up, would take its tenant
    past its quota's limits (max GPUs, CPUs, memory) with what the tenant holds now apart
    from them (its jobs and its other endpoints). `held_now` is what this endpoint's
    running replicas hold now (they are replaced, not added to); `changed` names the
    fields set, for where the message goes. Tenants without a quota are not limited."""
    tenant = endpoint.project.tenant
    limits = registry.tenant_limits(tenant)
    if limits is None:
        return
    n = replicas_wanted(endpoint)
    holdings = holdings_by_tenant([tenant.pk])[tenant.pk]
    for field, key, unit in RESOURCES:
        limit = limits.get(key)
        per_replica = getattr(endpoint, field)
        if limit is None or not per_replica:
            continue
        others = holdings[key] - held_now.get(key, 0)
        need = per_replica * n
        if others + need <= limit:
            continue
        by_services = holdings["services"][key] - held_now.get(key, 0)
        what = f"{n} replicas" if n != 1 else "1 replica"
        if endpoint.canary_alias:
            what += " (primary and canary)"
        raise ValidationError(
            {
                ("replicas" if "replicas" in changed else field): (
                    f"{what} × {_unit(per_replica, unit)} need {_unit(need, unit)}, but "
                    f"tenant {tenant.slug} may hold at most {_unit(limit, unit)} and holds "
                    f"{_unit(others, unit)} now ({_unit(others - by_services, unit)} by jobs, "
                    f"{_unit(by_services, unit)} by other endpoints); use fewer or smaller "
                    "replicas, or ask an administrator for a larger quota."
                )
            }
        )


def held_by(endpoint: Endpoint) -> dict[str, int]:
    """What the endpoint's running replicas hold now (as they were started)."""
    n = running_replica_counts().get(endpoint.pk, 0) if endpoint.pk else 0
    return {key: getattr(endpoint, field) * n for field, key, _ in RESOURCES}


@transaction.atomic
def create_endpoint(actor, project, *, name: str, model: RegisteredModel, **fields) -> Endpoint:
    """A new endpoint of `project` serving `model` (an alias or a version). Nothing runs
    until the first request (or `gantry predict`): replicas start on demand."""
    require(actor, "endpoint.manage", project)
    if model.project_id != project.pk:
        raise ValidationError({"model": f"{model} is not a model of {project}."})
    slug = slugify(name or "")[:50]
    if not slug or slug != (name or "").strip():
        raise ValidationError(
            {"name": "An endpoint's name is lowercase letters, digits and -, as in its URL."}
        )
    if Endpoint.objects.filter(project=project, name=slug).exists():
        raise ValidationError({"name": f"{project} already has an endpoint “{slug}”."})
    fields.setdefault("alias", "")
    fields.setdefault("version", None)
    endpoint = Endpoint(
        project=project,
        name=slug,
        model=model,
        created_by=actor,
        backend=settings.GANTRY_JOB_BACKEND,
    )
    _clean(endpoint, fields)
    check_quota(endpoint, {}, list(fields))
    endpoint.save()
    require(actor, "endpoint.manage", endpoint)
    audit.record(actor, "endpoint.create", endpoint, model=model.name)
    return endpoint


@transaction.atomic
def update_endpoint(actor, endpoint: Endpoint, **fields) -> Endpoint:
    """Change what an endpoint serves or how; the gateway rolls to it on the next request."""
    endpoint = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
    require(actor, "endpoint.manage", endpoint)
    held_now = held_by(endpoint)
    changed = _clean(endpoint, fields)
    if set(changed) & set(SIZING):
        check_quota(endpoint, held_now, changed)
    if changed:
        endpoint.save()
        audit.record(actor, "endpoint.change", endpoint, fields=changed)
        # This process's gateway at once, the others within admissions.TTL.
        transaction.on_commit(lambda: admissions.forget(endpoint.pk))
    return endpoint


def delete_endpoint(actor, endpoint: Endpoint) -> None:
    """Delete the endpoint and stop its replicas (their requests' log goes with it); on
    Kubernetes, its objects in the cluster are deleted."""
    from endpoints import rollout

    require(actor, "endpoint.manage", endpoint)
    pk, backend, tenant_slug = endpoint.pk, endpoint.backend, endpoint.project.tenant.slug
    with transaction.atomic():
        audit.record(actor, "endpoint.delete", endpoint)
        Endpoint.objects.filter(pk=pk).delete_locked()
    admissions.forget(pk)
    rollout.stop_replicas(pk, backend, tenant_slug)


def lock_before_cascade(deleting) -> None:
    """core.registry.before_cascade: the endpoints under the tenants, projects or models
    `deleting` locked as their own delete locks them (`lock_for_delete`), before that
    delete's cascade takes them; their replicas stopped once it commits."""
    from endpoints import rollout

    under = {Tenant: "project__tenant__in", Project: "project__in", RegisteredModel: "model__in"}
    path = under.get(deleting.model)
    if path is None:
        return
    endpoints = Endpoint.objects.filter(**{path: deleting})
    pks = endpoints.lock_for_delete()
    if not pks:
        return
    # Where each runs, read now: the rows are gone when their objects are deleted.
    where = endpoints.filter(pk__in=pks).values_list("pk", "backend", "project__tenant__slug")
    where = {pk: (backend, slug) for pk, backend, slug in where}

    def stop() -> None:
        for pk in pks:
            admissions.forget(pk)
            rollout.stop_replicas(pk, *where.get(pk, ("local", "")))

    transaction.on_commit(stop, using=deleting.db)


def create_endpoint_token(actor, endpoint: Endpoint, name: str) -> tuple[EndpointToken, str]:
    """(token, secret): a token that calls this endpoint only. The secret is shown once."""
    require(actor, "endpoint.manage", endpoint)
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationError({"name": "Give the token a name (at most 100 characters)."})
    secret = EndpointToken.PREFIX + secrets.token_urlsafe(32)
    token = EndpointToken.objects.create(
        endpoint=endpoint,
        name=name,
        key_prefix=secret[:8],
        key_hash=hash_secret(secret),
        created_by=actor,
    )
    audit.record(actor, "endpoint.token", endpoint, token=name)
    return token, secret


def revoke_endpoint_token(actor, token: EndpointToken) -> None:
    require(actor, "endpoint.manage", token.endpoint)
    EndpointToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())
    admissions.forget(token.endpoint_id)
    audit.record(actor, "endpoint.token_revoke", token.endpoint, token=token.name)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def running_replica_counts() -> dict[int, int]:
    """Endpoint id -> replicas running now (every version's: during a roll the old and the
    new both run and both hold their resources): the local backend's processes on this
    machine, and on Kubernetes the replicas of the Deployments Gantry scaled up
    (endpoints.usage's open intervals of them; endpoints.k8s)."""
    from endpoints import local, usage

    running: dict[int, int] = {}
    for replica in local.all_replicas():
        if local.running(replica):
            running[replica.endpoint_pk] = running.get(replica.endpoint_pk, 0) + 1
    asked = usage.open_deployments().filter(endpoint__isnull=False)
    for pk, n in asked.values_list("endpoint_id", "replicas"):
        running[pk] = running.get(pk, 0) + n
    return running


def tenant_serving_holdings(tenant_ids=None) -> dict[int, dict[str, int]]:
    """What tenants' endpoints' running replicas hold, {tenant id: {"gpus", "cpus",
    "memory_mb", "replicas"}} (core.registry.service_holdings). A scaled-to-zero endpoint
    holds nothing; one query (the Kubernetes replicas) while no replica runs."""
    running = running_replica_counts()
    if not running:
        return {}
    endpoints = Endpoint.objects.filter(pk__in=running)
    if tenant_ids is not None:
        endpoints = endpoints.filter(project__tenant_id__in=list(tenant_ids))
    held: dict[int, dict[str, int]] = {}
    for pk, tenant_id, cpus, memory_mb, gpus in endpoints.values_list(
        "pk", "project__tenant_id", "cpus", "memory_mb", "gpus"
    ):
        n = running[pk]
        into = held.setdefault(tenant_id, {"gpus": 0, "cpus": 0, "memory_mb": 0, "replicas": 0})
        into["gpus"] += gpus * n
        into["cpus"] += cpus * n
        into["memory_mb"] += memory_mb * n
        into["replicas"] += n
    return held


def serving_replicas(user) -> list[dict]:
    """Endpoints `user` may see with replicas running (on this machine or Kubernetes),
    and what those replicas hold (the cluster page)."""
    running = running_replica_counts()
    if not running:
        return []
    endpoints = (
        Endpoint.objects.visible_to(user)
        .filter(pk__in=running)
        .select_related("project__tenant", "serving_version")
        .order_by("project", "name")
    )
    return [
        {
            "endpoint": e,
            "replicas": running[e.pk],
            "cpus": e.cpus * running[e.pk],
            "memory_mb": e.memory_mb * running[e.pk],
            "gpus": e.gpus * running[e.pk],
        }
        for e in endpoints
    ]


def wanted_versions(endpoint: Endpoint) -> tuple[ModelVersion | None, ModelVersion | None]:
    """(primary, canary): the versions the endpoint should serve now (the canary None
    when it has none, or when its alias points at the primary's version)."""
    names = [n for n in (endpoint.alias, endpoint.canary_alias) if n]
    found = {
        a.name: a.version
        for a in Alias.objects.filter(model_id=endpoint.model_id, name__in=names).select_related(
            "version"
        )
    }
    primary = found.get(endpoint.alias) if endpoint.alias else endpoint.version
    canary = found.get(endpoint.canary_alias) if endpoint.canary_alias else None
    if canary is not None and primary is not None and canary.pk == primary.pk:
        canary = None
    return primary, canary
