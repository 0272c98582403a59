"""What tenants' jobs hold now (the quota and cluster pages, admission)."""

from __future__ import annotations

from django.db.models import Count, F, Q, Sum

from jobs import states
from jobs.models import Job
from jobs.states import JobState


def usage_by_tenant(tenant_ids) -> dict[int, dict[str, int]]:
    """What each tenant's jobs hold now and how many wait, in one aggregate query:
    {tenant id: {"gpus", "cpus", "memory_mb", "jobs", "queued"}} (active = admitted,
    starting or running; a job being preempted still holds its resources)."""
    active = Q(state__in=states.ACTIVE)
    rows = (
        Job.objects.filter(project__tenant_id__in=list(tenant_ids))
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
    usage = {tid: dict(empty) for tid in tenant_ids}
    for row in rows:
        usage[row.pop("project__tenant_id")] = {k: row[k] or 0 for k in empty}
    return usage


def tenant_usage(tenant) -> dict[str, int]:
    """GPUs, CPUs, memory (MiB) and jobs the tenant's active jobs hold now."""
    usage = usage_by_tenant([tenant.pk])[tenant.pk]
    return {k: usage[k] for k in ("gpus", "cpus", "memory_mb", "jobs")}
