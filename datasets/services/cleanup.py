"""Background cleanup: uploads nobody finished, blobs nothing refers to any more."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core import audit
from datasets.models import ArchiveImport, Blob, UploadFile, UploadSession, UploadState, blob_key
from datasets.services.staging import discard_staging

logger = logging.getLogger(__name__)


def cleanup_abandoned_uploads(now=None) -> int:
    """Abort uploads untouched for GANTRY_UPLOAD_EXPIRY_HOURS (and stuck commits)."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.GANTRY_UPLOAD_EXPIRY_HOURS)
    stale = UploadSession.objects.filter(
        Q(state__in=(UploadState.OPEN, UploadState.FAILED, UploadState.COMMITTING)),
        updated_at__lt=cutoff,
    )
    done = 0
    for session in stale:
        try:
            discard_staging(session)
        except Exception:
            logger.warning("could not clean up upload %s; will retry", session.pk, exc_info=True)
            continue
        audit.record(None, "dataset.upload_expire", session, tenant=session.tenant)
        done += 1
    # Archives whose task never ran.
    for archive in ArchiveImport.objects.filter(state=UploadState.OPEN, created_at__lt=cutoff):
        default_storage.delete(archive.staging_key)
        ArchiveImport.objects.filter(pk=archive.pk).update(
            state=UploadState.ABORTED, error="expired"
        )
    return done


def _unreferenced() -> dict[str, bool]:
    """No row of any model refers to the blob: dataset files, and the files of apps above
    datasets that keep blobs too (checkpoints), without naming them."""
    return {f"{rel.name}__isnull": True for rel in Blob._meta.related_objects if not rel.hidden}


def collect_garbage(grace: timedelta = timedelta(hours=1), now=None, among=None) -> int:
    """Delete blobs nothing refers to any more (older than `grace`, so a commit that is
    storing blobs right now keeps them); only those in `among` (sha256 values) if given."""
    now = now or timezone.now()
    candidates = Blob.objects.filter(created_at__lt=now - grace, **_unreferenced()).exclude(
        sha256__in=UploadFile.objects.exclude(blob=None).values("blob")
    )
    if among is not None:
        candidates = candidates.filter(sha256__in=list(among))
    removed = 0
    for sha in list(candidates.values_list("sha256", flat=True)[:10_000]):
        with transaction.atomic():
            deleted, _ = Blob.objects.filter(pk=sha, **_unreferenced()).delete()
        if deleted:
            default_storage.delete(blob_key(sha))
            removed += 1
    return removed
