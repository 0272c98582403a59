"""GPU telemetry's state changes: the per-day utilization sums, the idle policy (warn,
then stop), and a project's own policy.

Samples are the job's metric points `gpu<i>/utilization` (percent) and
`gpu<i>/memory_used_mb` that the executor ships (executor/gpu.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from core import audit
from jobs import states
from jobs.models import Job, JobKind, MetricPoint
from jobs.services.lifecycle import cancel_job, note_job
from jobs.services.system_log import append_system_log
from jobs.signals import job_alert
from jobs.states import JobState
from projects.permissions import require
from telemetry.models import GpuUsageDay, IdleKinds, IdlePolicy, IdleWatch

UTILIZATION = "/utilization"
MEMORY = "/memory_used_mb"
# Days whose sums are recomputed on every pass: today's and yesterday's (a late batch).
REFRESH_DAYS = 2


def gpu_points(suffix: str):
    """Metric points of one GPU field, every GPU of the job (`gpu0/…`, `gpu1/…`)."""
    return MetricPoint.objects.filter(name__startswith="gpu", name__endswith=suffix)


def _midnight(day) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


# --- per-day sums ------------------------------------------------------------------------


def refresh_usage(now: datetime | None = None, job_ids=None, since: datetime | None = None) -> int:
    """Recompute the per-day utilization sums of GPU jobs that ran lately (or `job_ids`),
    for the days from `since` (by default yesterday, UTC) on; returns rows written.
    Idempotent: a day's row is replaced by the sums of its samples."""
    now = now or timezone.now()
    since = since or _midnight((now - timedelta(days=REFRESH_DAYS - 1)).date())
    if job_ids is None:
        job_ids = list(
            Job.objects.filter(gpus__gt=0)
            .filter(Q(state__in=states.LAUNCHED) | Q(finished_at__gte=since))
            .values_list("pk", flat=True)
        )
    job_ids = list(job_ids)
    if not job_ids:
        return 0
    day = TruncDate("ts", tzinfo=UTC)
    base = {"job_id__in": job_ids, "ts__gte": since}
    sums = (
        gpu_points(UTILIZATION)
        .filter(**base)
        .annotate(day=day)
        .values("job_id", "day")
        .annotate(n=Count("pk"), total=Sum("value"))
    )
    memory = {
        (row["job_id"], row["day"]): row["top"]
        for row in gpu_points(MEMORY)
        .filter(**base)
        .annotate(day=day)
        .values("job_id", "day")
        .annotate(top=Max("value"))
    }
    written = 0
    with transaction.atomic():
        for row in sums:
            GpuUsageDay.objects.update_or_create(
                job_id=row["job_id"],
                day=row["day"],
                defaults={
                    "samples": row["n"],
                    "utilization_sum": round(row["total"] or 0),
                    "memory_max_mb": round(memory.get((row["job_id"], row["day"])) or 0),
                },
            )
            written += 1
    return written


def job_utilization(job_ids, now: datetime | None = None) -> dict[int, dict]:
    """{job id: {"current", "average"}} in percent (None where unknown), in two queries:
    current is the mean of the last minute's samples, average that of every day's sums."""
    now = now or timezone.now()
    job_ids = list(job_ids)
    stats: dict[int, dict] = {pk: {"current": None, "average": None} for pk in job_ids}
    if not job_ids:
        return stats
    recent = (
        gpu_points(UTILIZATION)
        .filter(job_id__in=job_ids, ts__gte=now - timedelta(minutes=1))
        .values("job_id")
        .annotate(n=Count("pk"), total=Sum("value"))
    )
    for row in recent:
        stats[row["job_id"]]["current"] = row["total"] / row["n"]
    days = (
        GpuUsageDay.objects.filter(job_id__in=job_ids)
        .values("job_id")
        .annotate(n=Sum("samples"), total=Sum("utilization_sum"))
    )
    for row in days:
        if row["n"]:
            stats[row["job_id"]]["average"] = row["total"] / row["n"]
    return stats


# --- idle policy ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """The idle policy in force for a project (its own, or the settings')."""

    enabled: bool
    threshold_percent: int
    idle: timedelta
    grace: timedelta
    kinds: str

    def applies_to(self, job: Job) -> bool:
        return self.enabled and (self.kinds == IdleKinds.ALL or job.kind == JobKind.NOTEBOOK)

    def describe(self) -> str:
        return f"GPU utilization below {self.threshold_percent}% for {_minutes(self.idle)} minutes"


def _minutes(delta: timedelta) -> str:
    minutes = delta.total_seconds() / 60
    return str(int(minutes)) if minutes.is_integer() else f"{minutes:g}"


def rule_for(policy: IdlePolicy | None) -> Rule:
    if policy is None:
        return Rule(
            enabled=True,
            threshold_percent=settings.GANTRY_GPU_IDLE_PERCENT,
            idle=timedelta(minutes=settings.GANTRY_GPU_IDLE_MINUTES),
            grace=timedelta(minutes=settings.GANTRY_GPU_IDLE_GRACE_MINUTES),
            kinds=settings.GANTRY_GPU_IDLE_KINDS,
        )
    return Rule(
        enabled=policy.enabled,
        threshold_percent=policy.threshold_percent,
        idle=timedelta(minutes=policy.idle_minutes),
        grace=timedelta(minutes=policy.grace_minutes),
        kinds=policy.kinds,
    )


def _idle_reason(job: Job, rule: Rule, now: datetime) -> str | None:
    """Why the job counts as idle now, or None. Its GPUs' samples over the policy's window
    decide; a GPU notebook without any (no NVML where it runs) falls back to requests."""
    if job.started_at is None or now - job.started_at < rule.idle:
        return None
    window = gpu_points(UTILIZATION).filter(job=job, ts__gte=now - rule.idle, ts__lte=now)
    seen = window.aggregate(n=Count("pk"), top=Max("value"))
    if seen["n"]:
        if seen["top"] < rule.threshold_percent:
            return rule.describe()
        return None
    if gpu_points(UTILIZATION).filter(job=job).exists() or job.kind != JobKind.NOTEBOOK:
        return None  # samples stopped coming: no evidence either way
    quiet = timedelta(minutes=settings.GANTRY_NOTEBOOK_IDLE_MINUTES)
    last = job.last_activity_at or job.started_at
    if now - last > quiet:
        return (
            f"no GPU telemetry and no notebook activity for "
            f"{settings.GANTRY_NOTEBOOK_IDLE_MINUTES} minutes"
        )
    return None


def check_idle(now: datetime | None = None) -> dict[str, int]:
    """Warn running GPU jobs their policy counts idle, stop those still idle after the
    grace period, and withdraw the warning of those that got to work. Returns counts."""
    now = now or timezone.now()
    outcomes = {"warned": 0, "stopped": 0, "withdrawn": 0}
    jobs = list(
        Job.objects.filter(state=JobState.RUNNING, gpus__gt=0, cancel_requested_at=None)
        .select_related("project")
        .order_by("pk")
    )
    policies = {
        p.project_id: p
        for p in IdlePolicy.objects.filter(project_id__in={j.project_id for j in jobs})
    }
    watches = {w.job_id: w for w in IdleWatch.objects.filter(job__in=jobs)}
    for job in jobs:
        rule = rule_for(policies.get(job.project_id))
        reason = _idle_reason(job, rule, now) if rule.applies_to(job) else None
        watch = watches.get(job.pk)
        if reason is None:
            if watch is not None and watch.stopped_at is None:
                watch.delete()
                outcomes["withdrawn"] += 1
            continue
        if watch is None:
            warn_idle(job, reason, now + rule.grace, now)
            outcomes["warned"] += 1
        elif watch.stopped_at is None and now >= watch.stop_at:
            stop_idle(job, watch, reason, now)
            outcomes["stopped"] += 1
    return outcomes


def warn_idle(job: Job, reason: str, stop_at: datetime, now: datetime) -> IdleWatch:
    """Record the warning, tell the people who hear of the job (notifications), show it."""
    message = (
        f"{reason}: this job will be stopped at {stop_at:%Y-%m-%d %H:%M:%S} UTC "
        "unless its GPUs get to work"
    )
    watch = IdleWatch.objects.create(job=job, warned_at=now, stop_at=stop_at, message=message)
    note_job(job, f"warned: {message}")
    append_system_log(job, message)
    transaction.on_commit(
        lambda: job_alert.send(None, job=job, kind="idle_warning", message=message)
    )
    return watch


def stop_idle(job: Job, watch: IdleWatch, reason: str, now: datetime) -> None:
    why = f"stopped by the idle-GPU policy: {reason}"[:500]
    try:
        cancel_job(None, job, why)
    except ValidationError:
        return  # it finished meanwhile
    append_system_log(job, f"{why}; this job is being stopped")
    watch.stopped_at = now
    watch.save(update_fields=["stopped_at"])


# --- a project's policy ------------------------------------------------------------------


def set_idle_policy(actor, project, **values) -> IdlePolicy:
    """Create or change a project's idle policy (maintainers), audited."""
    require(actor, "project.change", project)
    with transaction.atomic():
        policy, _ = IdlePolicy.objects.update_or_create(project=project, defaults=values)
        require(actor, "project.change", project)
        audit.record(actor, "telemetry.idle_policy", policy, **values)
    return policy
