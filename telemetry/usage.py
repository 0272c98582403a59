"""Usage reports: GPU-hours allocated and GPU-hours used, per tenant, project or user, by
day, week or month, of jobs and of model endpoints (rows of each kind). Integer
GPU-seconds throughout; hours only when shown.

* **Allocated**: a job holds its GPUs (`gpus` x `workers`) while it is admitted, starting
  or running (its timeline: every attempt, requeues and preemptions included, and until
  now for a job still holding them). Each stretch is split at UTC midnight; a job's
  seconds on a day are whole seconds (rounded down).
* **Used**: the allocated GPU-seconds of a job on a day times its GPUs' mean utilization
  that day (the mean of every `gpu<i>/utilization` sample, exact from the day's integer
  sums), rounded half to even to whole GPU-seconds.
* **Unmeasured**: allocated GPU-seconds of job-days without a single sample (no NVML where
  the job ran); they count as allocated and not as used.
* **Endpoints** (rows of kind "endpoint"): the stretches their replicas ran
  (core.registry.service_usage), split at UTC midnight in whole seconds as a job's are:
  replica-seconds are replicas x those seconds, allocated GPU-seconds replica-seconds x
  the GPUs per replica. Replicas are not sampled: their GPU-seconds are unmeasured.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from django.db.models import Prefetch, Q
from django.utils import timezone

from jobs import states
from jobs.models import Job, JobEvent
from telemetry.models import GpuUsageDay

GROUPS = ("tenant", "project", "user")
KINDS = ("job", "endpoint")
PERIODS = ("day", "week", "month")
HOUR = Decimal(3600)


def gpu_hours(seconds: int) -> Decimal:
    """GPU-seconds (or replica-seconds) as hours to four decimals (the CSV's and the API's)."""
    return (Decimal(seconds) / HOUR).quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN)


def report_bounds(first: date, last: date) -> tuple[datetime, datetime]:
    """[start, end) of the UTC days first..last."""
    start = datetime.combine(first, time.min, tzinfo=UTC)
    return start, datetime.combine(last + timedelta(days=1), time.min, tzinfo=UTC)


def period_start(day: date, period: str) -> date:
    if period == "week":
        return day - timedelta(days=day.weekday())  # ISO weeks start on Monday
    if period == "month":
        return day.replace(day=1)
    return day


def held_stretches(events, now: datetime) -> list[tuple[datetime, datetime]]:
    """The stretches a job held its GPUs, from its timeline (events in order)."""
    stretches, since = [], None
    for event in events:
        active = event.to_state in states.ACTIVE
        if active and since is None:
            since = event.at
        elif not active and since is not None:
            stretches.append((since, event.at))
            since = None
    if since is not None:
        stretches.append((since, now))
    return stretches


def seconds_by_day(start: datetime, end: datetime) -> dict[date, int]:
    """Whole seconds of [start, end) on each UTC day it touches."""
    out: dict[date, int] = {}
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), time.min, tzinfo=UTC)
        stop = min(end, midnight)
        out[start.date()] = out.get(start.date(), 0) + int((stop - start).total_seconds())
        start = stop
    return out


@dataclass
class Row:
    period: date
    key: tuple  # (tenant, project, user) names, those not grouped by left empty
    kind: str = "job"  # or "endpoint" (KINDS)
    allocated: int = 0
    used: int = 0
    unmeasured: int = 0
    replica: int = 0  # replica-seconds (endpoints)
    jobs: set = field(default_factory=set)
    endpoints: set = field(default_factory=set)

    @property
    def utilization(self) -> Decimal | None:
        """Used over measured allocated GPU-seconds, percent with one decimal."""
        measured = self.allocated - self.unmeasured
        if measured <= 0:
            return None
        return (Decimal(self.used * 100) / Decimal(measured)).quantize(Decimal("0.1"))

    def as_dict(self) -> dict:
        tenant, project, user = self.key
        return {
            "period": self.period.isoformat(),
            "kind": self.kind,
            "tenant": tenant,
            "project": project,
            "user": user,
            "jobs": len(self.jobs),
            "endpoints": len(self.endpoints),
            "replica_seconds": self.replica,
            "replica_hours": str(gpu_hours(self.replica)),
            "allocated_gpu_seconds": self.allocated,
            "used_gpu_seconds": self.used,
            "unmeasured_gpu_seconds": self.unmeasured,
            "allocated_gpu_hours": str(gpu_hours(self.allocated)),
            "used_gpu_hours": str(gpu_hours(self.used)),
            "unmeasured_gpu_hours": str(gpu_hours(self.unmeasured)),
            "utilization_percent": None if self.utilization is None else str(self.utilization),
        }


def _key(tenant: str, project: str, user: str, group: str) -> tuple:
    if group == "tenant":
        return (tenant, "", "")
    if group == "project":
        return (tenant, f"{tenant}/{project}", "")
    return (tenant, "", user)


def _job_key(job: Job, group: str) -> tuple:
    user = job.created_by.username if job.created_by else ""
    return _key(job.project.tenant.slug, job.project.slug, user, group)


def build_report(
    jobs,
    first: date,
    last: date,
    *,
    group: str = "tenant",
    period: str = "day",
    now=None,
    services=(),
) -> list[Row]:
    """Rows of GPU-seconds for `jobs` (a queryset the caller restricted to what the reader
    may see) and for `services`' stretches (core.registry.service_usage's dicts, as
    restricted) on the UTC days first..last, grouped and bucketed; sorted by period, then
    key, then kind (a project's jobs, then its endpoints)."""
    if group not in GROUPS or period not in PERIODS:
        raise ValueError(f"group is one of {GROUPS}, period one of {PERIODS}")
    now = now or timezone.now()
    start, end = report_bounds(first, last)
    jobs = (
        jobs.filter(gpus__gt=0, admitted_at__isnull=False, created_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .select_related("project__tenant", "created_by")
        .prefetch_related(Prefetch("events", queryset=JobEvent.objects.order_by("at", "pk")))
    )
    jobs = list(jobs)
    sums = {
        (u.job_id, u.day): u
        for u in GpuUsageDay.objects.filter(job__in=jobs, day__gte=first, day__lte=last)
    }
    rows: dict[tuple, Row] = {}
    for job in jobs:
        gpus = job.gpus * job.workers
        days: dict[date, int] = defaultdict(int)
        for held_from, held_to in held_stretches(job.events.all(), now):
            for day, seconds in seconds_by_day(max(held_from, start), min(held_to, end)).items():
                days[day] += seconds
        for day, seconds in days.items():
            allocated = seconds * gpus
            key = (period_start(day, period), _job_key(job, group), "job")
            row = rows.get(key) or rows.setdefault(key, Row(*key))
            row.allocated += allocated
            row.jobs.add(job.pk)
            usage = sums.get((job.pk, day))
            if usage is None or not usage.samples:
                row.unmeasured += allocated
                continue
            used = Fraction(allocated * usage.utilization_sum, 100 * usage.samples)
            row.used += round(used)  # Fraction rounds half to even
    for ran in services:
        key = _key(ran["tenant"], ran["project"], ran["user"], group)
        stretch = seconds_by_day(max(ran["start"], start), min(ran["end"] or now, end))
        for day, seconds in stretch.items():
            found = (period_start(day, period), key, ran["kind"])
            row = rows.get(found) or rows.setdefault(found, Row(*found))
            row.replica += seconds * ran["replicas"]
            row.allocated += seconds * ran["replicas"] * ran["gpus"]
            row.unmeasured += seconds * ran["replicas"] * ran["gpus"]
            row.endpoints.add(ran["id"])
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1], KINDS.index(k[2])))]


def totals(rows: list[Row]) -> dict:
    """The report's totals across every row."""
    total = Row(date.min, ("", "", ""))
    for row in rows:
        total.allocated += row.allocated
        total.used += row.used
        total.unmeasured += row.unmeasured
        total.replica += row.replica
        total.jobs |= row.jobs
        total.endpoints |= row.endpoints
    return total.as_dict() | {"period": None, "kind": None}


def write_csv(rows: list[Row], out) -> None:
    columns = list(Row(date.min, ("", "", "")).as_dict())
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        writer.writerow(row.as_dict())


def chart_series(rows: list[Row]) -> dict:
    """Allocated and used GPU-hours per period (every group summed), for the page's chart."""
    by_period: dict[date, list[int]] = {}
    for row in rows:
        pair = by_period.setdefault(row.period, [0, 0])
        pair[0] += row.allocated
        pair[1] += row.used
    periods = sorted(by_period)
    return {
        "x": [int(datetime.combine(p, time.min, tzinfo=UTC).timestamp()) for p in periods],
        "allocated": [float(gpu_hours(by_period[p][0])) for p in periods],
        "used": [float(gpu_hours(by_period[p][1])) for p in periods],
    }
