"""What tenants hold now: their jobs' GPUs, CPUs, memory and count, plus what their
long-running services hold (model endpoints' replicas, asked through
`core.registry.service_holdings`), for the quota and cluster pages, quota warnings and
endpoints' own quota check. Admission reads the same two sources into its snapshot
(`scheduling.admission.read_snapshot`). Not to be confused with `telemetry.usage`: GPU-hours
used over time."""

from __future__ import annotations

from django.db.models import Count, F, Q, Sum

from core import registry
from jobs import states
from jobs.models import Job
from jobs.states import JobState

RESOURCES = ("gpus", "cpus", "memory_mb")


def service_holdings(tenant_ids=None) -> dict[int, dict[str, int]]:
    """What every provider's services (model endpoints' replicas) hold, summed per tenant:
    {tenant id: {"gpus", "cpus", "memory_mb", "replicas"}}, only tenants holding some."""
    summed: dict[int, dict[str, int]] = {}
    for answer in registry.service_holdings(tenant_ids):
        for tenant_id, held in answer.items():
            into = summed.setdefault(tenant_id, dict.fromkeys((*RESOURCES, "replicas"), 0))
            for key in into:
                into[key] += held.get(key, 0)
    return summed


def holdings_by_tenant(tenant_ids) -> dict[int, dict]:
    """What each tenant holds now and how many jobs wait, in one aggregate query and one
    question to the services: {tenant id: {"gpus", "cpus", "memory_mb", "jobs", "queued",
    "services"}}. GPUs, CPUs and memory are the tenant's whole holdings (its active jobs'
    and its services'); "services" is the services' part, {"gpus", "cpus", "memory_mb",
    "replicas"} (active = admitted, starting or running; a job being preempted still holds
    its resources)."""
    tenant_ids = list(tenant_ids)
    active = Q(state__in=states.ACTIVE)
    rows = (
        Job.objects.filter(project__tenant_id__in=tenant_ids)
        .filter(active | Q(state=JobState.QUEUED))
        .values("project__tenant_id")
        .annotate(
            gpus=Sum(F("gpus") * F("workers"), filter=active),
            cpus=Sum(F("cpus") * F("workers"), filter=active),
            memory_mb=Sum(F("memory_mb") * F("workers"), filter=active),
            jobs=Count("pk", filter=active),
            queued=Count("pk", filter=Q(state=JobState.QUEUED)),
        )
    )
    empty = {"gpus": 0, "cpus": 0, "memory_mb": 0, "jobs": 0, "queued": 0}
    nothing = dict.fromkeys((*RESOURCES, "replicas"), 0)
    usage = {tid: dict(empty) for tid in tenant_ids}
    for row in rows:
        usage[row.pop("project__tenant_id")] = {k: row[k] or 0 for k in empty}
    services = service_holdings(tenant_ids) if tenant_ids else {}
    for tid, held in usage.items():
        held["services"] = services.get(tid, nothing)
        for key in RESOURCES:
            held[key] += held["services"][key]
    return usage


def tenant_holdings(tenant) -> dict[str, int]:
    """GPUs, CPUs and memory (MiB) the tenant holds now (its active jobs and its services
    together), and how many jobs it runs."""
    usage = holdings_by_tenant([tenant.pk])[tenant.pk]
    return {k: usage[k] for k in ("gpus", "cpus", "memory_mb", "jobs")}
