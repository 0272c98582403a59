"""django-q tasks of snapshots (scheduled hourly from apps.py)."""

from snapshots.services import expire_pending_snapshots

SCHEDULES = {
    # name: (function, minutes between runs)
    "snapshots: expire pending snapshots": ("snapshots.tasks.expire_pending", 60),
}


def expire_pending() -> int:
    return expire_pending_snapshots()
