"""Hyperparameter sweeps: a job template, a search space, an objective and a budget; each
trial is an ordinary Job.

Optuna's study (the trials it asked for, their parameters, intermediate values, states)
lives in StudyLog, Optuna's journal kept in Gantry's database (sweeps/journal.py).
Sweep and Trial are what pages, the API and the budget read; the controller
(sweeps/controller.py) keeps them in step with the study and the jobs.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.links import object_url
from jobs.models import Job
from projects.models import Project, in_visible_projects


class SweepState(models.TextChoices):
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    SUCCEEDED = "succeeded", "Finished"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"


FINISHED_STATES = {SweepState.SUCCEEDED, SweepState.FAILED, SweepState.STOPPED}
SWEEP_BADGES = {
    SweepState.RUNNING: "text-bg-primary",
    SweepState.STOPPING: "text-bg-warning",
    SweepState.SUCCEEDED: "text-bg-success",
    SweepState.FAILED: "text-bg-danger",
    SweepState.STOPPED: "text-bg-secondary",
}


class SweepQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class Sweep(models.Model):
    """A hyperparameter search run as Gantry jobs.

    `template` is a job spec (command, image id, resources, env, fixed parameters, code
    snapshot id when jobs have one); `space` the cleaned search space (sweeps/space.py);
    budgets left null are unlimited (at least one is required).
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sweeps")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    source = models.TextField(blank=True, help_text="The YAML/JSON the sweep was created from.")
    template = models.JSONField(default=dict)
    space = models.JSONField(default=dict)
    objective = models.CharField(max_length=200)
    direction = models.CharField(max_length=8, default="maximize")
    sampler = models.CharField(max_length=16, default="tpe")
    pruner = models.JSONField(default=dict, blank=True)
    seed = models.IntegerField(default=0)
    max_trials = models.PositiveIntegerField(null=True, blank=True)
    max_gpu_hours = models.FloatField("max GPU-hours", null=True, blank=True)
    max_wall_seconds = models.PositiveIntegerField(null=True, blank=True)
    parallelism = models.PositiveIntegerField(default=2)
    stop_after_failures = models.PositiveIntegerField(default=3)
    state = models.CharField(max_length=16, choices=SweepState.choices, default=SweepState.RUNNING)
    state_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True)
    # optuna.importance, cached: recomputed when the number of finished trials changes.
    importance = models.JSONField(default=dict, blank=True)
    importance_trials = models.PositiveIntegerField(default=0)

    objects = SweepQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"sweep #{self.pk} {self.name}"

    def get_absolute_url(self):
        return object_url("sweeps:sweep_detail", self.pk)

    @property
    def tenant(self):
        return self.project.tenant

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def state_badge(self) -> str:
        return SWEEP_BADGES.get(self.state, "text-bg-secondary")

    @property
    def study_name(self) -> str:
        return f"gantry-sweep-{self.pk}"


class TrialState(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETE = "complete", "Complete"
    PRUNED = "pruned", "Pruned"
    FAILED = "failed", "Failed"


class TrialQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "sweep__project")


class Trial(models.Model):
    """One point of the search space, run as one job (Optuna's trial `number`)."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="sweep_trial"
    )
    params = models.JSONField(default=dict)
    objective = models.FloatField(null=True, blank=True)
    # Intermediate objective values reported to Optuna so far (the last one's step).
    reported = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=TrialState.choices, default=TrialState.RUNNING)
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TrialQuerySet.as_manager()

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "number"], name="trial_unique_number")
        ]

    def __str__(self):
        return f"{self.sweep} trial {self.number}"

    @property
    def project(self):
        return self.sweep.project


class StudyLog(models.Model):
    """One entry of Optuna's journal for a sweep's study, numbered from 0 in append order."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="study_logs")
    number = models.PositiveIntegerField()
    entry = models.JSONField()

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "number"], name="studylog_unique_number")
        ]

    def __str__(self):
        return f"{self.sweep} log {self.number}"
