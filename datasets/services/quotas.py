"""A tenant's dataset storage: its quota, what it holds, and the check before bytes move."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q, Sum

from core import registry
from datasets.models import Blob, DatasetFile, StorageQuota, UploadSession, UploadState
from datasets.services.paths import human

# Uploads that still hold the bytes they reserved.
LIVE = (UploadState.OPEN, UploadState.COMMITTING)


def tenant_quota(tenant) -> int:
    row = StorageQuota.objects.filter(tenant=tenant).first()
    if row is not None:
        return row.bytes
    return int(settings.GANTRY_TENANT_STORAGE_QUOTA_GB * 1024**3)


def tenant_usage(tenant) -> int:
    """Bytes a tenant holds: its distinct blobs, plus what open uploads have reserved. Apps
    above datasets that keep files in the blob store (checkpoints, snapshots) add their blobs
    and reservations through `core.registry.blobs_held` and `bytes_reserved`."""
    blobs = DatasetFile.objects.filter(version__dataset__project__tenant=tenant).values("blob")
    held = Q(sha256__in=blobs)
    for theirs in registry.blobs_held(tenant):
        held |= Q(sha256__in=theirs)
    stored = Blob.objects.filter(held).aggregate(n=Sum("size"))["n"] or 0
    reserved = (
        UploadSession.objects.filter(dataset__project__tenant=tenant, state__in=LIVE).aggregate(
            n=Sum("reserved_bytes")
        )["n"]
        or 0
    )
    return stored + reserved + sum(registry.bytes_reserved(tenant))


def check_quota(tenant, more: int) -> None:
    quota, used = tenant_quota(tenant), tenant_usage(tenant)
    if used + more > quota:
        raise ValidationError(
            f"This needs {human(more)} but the tenant has {human(max(quota - used, 0))} "
            f"of its {human(quota)} dataset storage left."
        )
