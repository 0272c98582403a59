"""django-q tasks of checkpoints (scheduled every 15 minutes from apps.py)."""

from checkpoints.services import apply_retention
from jobs.models import Job


def enforce_retention() -> int:
    """Apply each project's retention policy to every job holding checkpoints; returns how
    many checkpoints were deleted (their blobs go with datasets' garbage collection)."""
    deleted = 0
    for job in Job.objects.filter(checkpoints__isnull=False).distinct().iterator():
        deleted += apply_retention(job)
    return deleted
