"""Background work for notifications (django-q2): fan an event out into deliveries,
send them, retry what is due, and raise the alerts a periodic look finds (jobs waiting
too long, tenants near their GPU quota). Plain functions that tests call directly."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.schedules import register_minute_schedules
from jobs.models import Job
from jobs.signals import job_alert
from jobs.states import ACTIVE, JobState
from notifications import services
from notifications.models import AlertSent, Delivery, DeliveryState

logger = logging.getLogger(__name__)

SCHEDULES = {
    "notifications: retry deliveries": ("notifications.tasks.retry_due", 1),
    "notifications: waiting jobs and quotas": ("notifications.tasks.check_alerts", 1),
}


def _queue_delivery(subscription_id: int, job_id: int | None) -> None:
    from django_q.tasks import async_task

    async_task(
        "notifications.tasks.deliver",
        subscription_id,
        job_id,
        task_name=f"notifications: deliver to {subscription_id}",
    )


def notify(job_id: int, event: str, message: str = "") -> int:
    """Record one delivery per recipient of `event`, then queue each recipient's sending
    (one task per subscription, so a slow endpoint holds up only its own deliveries)."""
    job = Job.objects.select_related("project__tenant").filter(pk=job_id).first()
    if job is None:
        return 0
    queues = services.record_event(job, event, message)
    for subscription_id, queue_job in queues:
        _queue_delivery(subscription_id, queue_job)
    return len(queues)


def deliver(subscription_id: int, job_id: int | None) -> int:
    return services.deliver_queue(subscription_id, job_id)


def retry_due(now=None) -> int:
    """Every minute: send what waited out its backoff."""
    sent = 0
    for subscription_id, job_id in services.due_queues(now):
        sent += services.deliver_queue(subscription_id, job_id, now)
    return sent


def _raise_once(key: str) -> bool:
    try:
        with transaction.atomic():
            AlertSent.objects.create(key=key)
    except IntegrityError:
        return False
    return True


def check_waiting(now=None) -> int:
    """Queued jobs past their project's threshold: `job_alert(waiting_long)` once each,
    with the scheduler's "why pending" text (the queued job's state reason)."""
    now = now or timezone.now()
    shortest = timedelta(minutes=1)
    raised = 0
    queued = Job.objects.filter(state=JobState.QUEUED, queued_at__lte=now - shortest)
    thresholds: dict[int, int] = {}
    for job in queued.select_related("project__tenant").order_by("pk")[:1000]:
        if job.project_id not in thresholds:
            thresholds[job.project_id] = services.waiting_minutes_of(job.project)
        minutes = thresholds[job.project_id]
        if job.queued_at > now - timedelta(minutes=minutes):
            continue
        if not _raise_once(f"waiting:job:{job.pk}:{job.attempt}:{job.preemptions}"):
            continue
        why = job.state_reason or "waiting for capacity"
        job_alert.send(
            sender=None,
            job=job,
            kind="waiting_long",
            message=f"queued for over {minutes} min: {why}",
        )
        raised += 1
    return raised


def check_quotas() -> int:
    """Tenants using at least GANTRY_NOTIFY_QUOTA_PERCENT of their GPU quota (guarantee
    plus borrow limit): `job_alert(quota_nearly_full)` once, on their latest active job,
    and again only after usage fell back below the line."""
    from scheduling.models import TenantQuota

    percent = settings.GANTRY_NOTIFY_QUOTA_PERCENT
    used = dict(
        Job.objects.filter(state__in=ACTIVE)
        .values("project__tenant_id")
        .annotate(gpus=Sum(F("gpus") * F("workers")))
        .values_list("project__tenant_id", "gpus")
    )
    raised = 0
    for quota in TenantQuota.objects.select_related("tenant"):
        limit = quota.max_gpus
        key = f"quota:tenant:{quota.tenant_id}"
        if not limit or (used.get(quota.tenant_id) or 0) * 100 < limit * percent:
            AlertSent.objects.filter(key=key).delete()
            continue
        if not _raise_once(key):
            continue
        job = (
            Job.objects.filter(project__tenant_id=quota.tenant_id, state__in=ACTIVE)
            .select_related("project__tenant")
            .order_by("-pk")
            .first()
        )
        message = f"{used[quota.tenant_id]} of {limit} GPUs of {quota.tenant.name} in use"
        job_alert.send(sender=None, job=job, kind="quota_nearly_full", message=message)
        raised += 1
    return raised


def forget_old(now=None) -> int:
    """Drop deliveries no longer pending after GANTRY_NOTIFY_LOG_DAYS, and the marks of
    alerts raised as long ago (their jobs have long moved on)."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.GANTRY_NOTIFY_LOG_DAYS)
    removed, _ = Delivery.objects.filter(
        created_at__lt=cutoff, state__in=[DeliveryState.DELIVERED, DeliveryState.FAILING]
    ).delete()
    AlertSent.objects.filter(at__lt=cutoff, key__startswith="waiting:").delete()
    return removed


def check_alerts() -> int:
    raised = check_waiting() + check_quotas()
    forget_old()
    return raised


def register_schedules(**kwargs) -> None:
    register_minute_schedules(SCHEDULES)
