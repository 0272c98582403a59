"""Background work for datasets (django-q2): commits, archive unpacking, cleanup.

Schedules are registered by code after every migrate (`register_schedules`), like
jobs/tasks.py: abandoned uploads are aborted hourly, unreferenced blobs collected daily.
"""

from __future__ import annotations

import logging

from core.schedules import register_minute_schedules
from datasets.services import archives, bucket_imports, cleanup, commits

logger = logging.getLogger(__name__)

SCHEDULES = {
    # name: (function, minutes between runs)
    "datasets: abort abandoned uploads": ("datasets.tasks.cleanup_uploads", 60),
    "datasets: collect unreferenced blobs": ("datasets.tasks.collect_garbage", 24 * 60),
}


def enqueue(func: str, object_id: int) -> None:
    """Queue a task; if the broker is down the object stays as it is and can be retried."""
    from django_q.tasks import async_task

    try:
        async_task(func, object_id, task_name=f"{func} {object_id}")
    except Exception:
        logger.warning("could not queue %s(%s)", func, object_id, exc_info=True)


def commit_upload(session_id: int) -> str:
    return commits.finish_commit(session_id).state


def extract_archive(import_id: int) -> str:
    return archives.extract_archive(import_id).state


def import_bucket_prefix(import_id: int) -> str:
    return bucket_imports.import_bucket_prefix(import_id).state


def cleanup_uploads() -> int:
    return cleanup.cleanup_abandoned_uploads()


def collect_garbage() -> int:
    return cleanup.collect_garbage()


def register_schedules(**kwargs) -> None:
    register_minute_schedules(SCHEDULES)
