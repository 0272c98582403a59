"""A tenant's dataset storage: its quota, what it holds, and the check before bytes move."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q, Sum

from datasets.models import Blob, DatasetFile, StorageQuota, UploadSession, UploadState
from datasets.services.paths import human

# Uploads that still hold the bytes they reserved.
LIVE = (UploadState.OPEN, UploadState.COMMITTING)


# Apps above datasets that keep files in the blob store too (checkpoints) hand in
# `tenant -> queryset of blob sha256 values` when they start; those blobs count as well.
_BLOB_HOLDERS: list[Callable] = []


def count_blobs_of(holder: Callable) -> None:
    if holder not in _BLOB_HOLDERS:
        _BLOB_HOLDERS.append(holder)


# ... and `tenant -> bytes` they have reserved for contents still on their way (code
# snapshots waiting for their files), so two of them cannot both take the last bytes.
_RESERVERS: list[Callable] = []


def count_reserved_by(reserver: Callable) -> None:
    if reserver not in _RESERVERS:
        _RESERVERS.append(reserver)


def tenant_quota(tenant) -> int:
    row = StorageQuota.objects.filter(tenant=tenant).first()
    if row is not None:
        return row.bytes
    return int(settings.GANTRY_TENANT_STORAGE_QUOTA_GB * 1024**3)


def tenant_usage(tenant) -> int:
    """Bytes a tenant holds: its distinct blobs, plus what open uploads (and the other apps'
    reservers) have reserved."""
    blobs = DatasetFile.objects.filter(version__dataset__project__tenant=tenant).values("blob")
    held = Q(sha256__in=blobs)
    for holder in _BLOB_HOLDERS:
        held |= Q(sha256__in=holder(tenant))
    stored = Blob.objects.filter(held).aggregate(n=Sum("size"))["n"] or 0
    reserved = (
        UploadSession.objects.filter(dataset__project__tenant=tenant, state__in=LIVE).aggregate(
            n=Sum("reserved_bytes")
        )["n"]
        or 0
    )
    return stored + reserved + sum(reserver(tenant) for reserver in _RESERVERS)


def check_quota(tenant, more: int) -> None:
    quota, used = tenant_quota(tenant), tenant_usage(tenant)
    if used + more > quota:
        raise ValidationError(
            f"This needs {human(more)} but the tenant has {human(max(quota - used, 0))} "
            f"of its {human(quota)} dataset storage left."
        )
