"""GPU telemetry: per-project idle policies, the warnings they gave, and per-day sums of
each job's utilization samples (the usage reports' used GPU-hours).

The samples themselves are the job's metric points named `gpu<i>/<field>` (the executor
ships them with the job's metrics, executor/gpu.py); this app keeps what it derives from
them compact: one row per job and UTC day."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from jobs.models import Job
from projects.models import Project


class IdleKinds(models.TextChoices):
    NOTEBOOK = "notebook", "Notebooks"
    ALL = "all", "Every job kind"


class IdlePolicyQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(project__in=Project.objects.visible_to(user))


class IdlePolicy(models.Model):
    """A project's rule for idle GPUs: a job (of `kinds`) whose GPUs stay below
    `threshold_percent` utilization for `idle_minutes` is warned, then stopped after
    `grace_minutes` unless it gets to work. Projects without one use the settings'."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, related_name="gpu_idle_policy"
    )
    enabled = models.BooleanField(default=True)
    threshold_percent = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    idle_minutes = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    grace_minutes = models.PositiveIntegerField(default=15)
    kinds = models.CharField(max_length=16, choices=IdleKinds.choices, default=IdleKinds.NOTEBOOK)

    objects = IdlePolicyQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "idle policies"

    def __str__(self):
        return f"{self.project}: below {self.threshold_percent}% for {self.idle_minutes} min"

    @property
    def tenant(self):
        return self.project.tenant


class IdleWatchQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(job__in=Job.objects.visible_to(user))


class IdleWatch(models.Model):
    """A GPU job warned for idleness: when, why, and when it will be stopped. Removed when
    its GPUs get to work again; `stopped_at` is set once the policy stopped it."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="gpu_idle_watch")
    warned_at = models.DateTimeField()
    stop_at = models.DateTimeField()
    message = models.CharField(max_length=500)
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = IdleWatchQuerySet.as_manager()

    def __str__(self):
        return f"job #{self.job_id}: {self.message}"

    @property
    def project(self):
        return self.job.project


class GpuUsageDayQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(job__in=Job.objects.visible_to(user))


class GpuUsageDay(models.Model):
    """One job's GPU utilization samples on one UTC day, summed: `utilization_sum` is the
    sum of the samples' percentages (whole numbers, as NVML reports them), so the day's
    mean utilization is exact: utilization_sum / samples."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="gpu_usage_days")
    day = models.DateField()
    samples = models.PositiveIntegerField(default=0)
    utilization_sum = models.BigIntegerField(default=0)
    memory_max_mb = models.PositiveIntegerField(default=0)

    objects = GpuUsageDayQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "day"], name="gpuusageday_unique_job_day")
        ]
        indexes = [models.Index(fields=["day"], name="gpuusageday_day_idx")]

    def __str__(self):
        return f"job #{self.job_id} on {self.day}: {self.samples} samples"

    @property
    def project(self):
        return self.job.project
