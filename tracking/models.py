"""Experiments, runs and what runs log, as MLflow's tracking API sees them.

An Experiment lives in a Project (each project has one default experiment, which the
API calls "0" for a caller limited to that project); a Run in an Experiment, and a
Run started for a Gantry job points at that Job. `visible_to(user)` is "the project
is visible to the user", like every other table.

Times are MLflow's: integer milliseconds since the epoch.
"""

import time
import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse

from jobs.models import Job
from modelhub.models import ModelVersion, RegisteredModel
from projects.models import Project, in_visible_projects


def now_ms() -> int:
    return int(time.time() * 1000)


def new_run_id() -> str:
    return uuid.uuid4().hex


class Lifecycle(models.TextChoices):
    ACTIVE = "active"
    DELETED = "deleted"


class RunStatus(models.TextChoices):
    RUNNING = "RUNNING"
    SCHEDULED = "SCHEDULED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


class ExperimentQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class Experiment(models.Model):
    """A named group of runs in a project (MLflow's experiment)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=500)
    is_default = models.BooleanField(default=False)
    lifecycle_stage = models.CharField(
        max_length=8, choices=Lifecycle.choices, default=Lifecycle.ACTIVE
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    creation_time = models.BigIntegerField(default=now_ms)
    last_update_time = models.BigIntegerField(default=now_ms)

    objects = ExperimentQuerySet.as_manager()

    class Meta:
        ordering = ["-pk"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="experiment_unique_name"),
            models.UniqueConstraint(
                fields=["project"],
                condition=models.Q(is_default=True),
                name="experiment_one_default",
            ),
        ]

    def __str__(self):
        return f"{self.project}/{self.name}"

    def get_absolute_url(self):
        return reverse("tracking:experiment_detail", args=[self.pk])

    @property
    def tenant(self):
        return self.project.tenant

    @property
    def full_name(self) -> str:
        """The name MLflow clients see: unique across Gantry, `tenant/project/name`."""
        return f"{self.project.tenant.slug}/{self.project.slug}/{self.name}"


class ExperimentTag(models.Model):
    """A key/value tag on an experiment."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="tags")
    key = models.CharField(max_length=250)
    value = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["experiment", "key"], name="experimenttag_unique_key")
        ]

    def __str__(self):
        return self.key


class RunQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "experiment__project")


class InExperiment:
    """A run or a logged model: its project and tenant are its experiment's."""

    @property
    def project(self):
        return self.experiment.project

    @property
    def tenant(self):
        return self.experiment.project.tenant


class Run(InExperiment, models.Model):
    """One run of training code: its status, parameters, metrics and tags."""

    run_id = models.CharField(max_length=64, unique=True, default=new_run_id)
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="tracking_run"
    )
    name = models.CharField(max_length=250, blank=True)
    user_id = models.CharField(max_length=150, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    start_time = models.BigIntegerField(null=True, blank=True)
    end_time = models.BigIntegerField(null=True, blank=True)
    lifecycle_stage = models.CharField(
        max_length=8, choices=Lifecycle.choices, default=Lifecycle.ACTIVE
    )
    deleted_time = models.BigIntegerField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-start_time", "run_id"]
        indexes = [
            models.Index(fields=["experiment", "-start_time"], name="run_experiment_start_idx")
        ]

    def __str__(self):
        return self.run_id

    def get_absolute_url(self):
        return reverse("tracking:run_detail", args=[self.pk])

    @property
    def artifact_uri(self) -> str:
        return f"mlflow-artifacts:/{self.experiment_id}/{self.run_id}/artifacts"


class Param(models.Model):
    """A run's parameter: written once, never changed (MLflow's rule)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="params")
    key = models.CharField(max_length=250)
    value = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="param_unique_key")]

    def __str__(self):
        return self.key


class RunTag(models.Model):
    """A run's tag (MLflow keeps its own, `mlflow.*`, here too)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tags")
    key = models.CharField(max_length=250)
    value = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="runtag_unique_key")]

    def __str__(self):
        return self.key


class Metric(models.Model):
    """One logged metric value: append-only, read by (run, key) in step order.

    NaN is kept as `is_nan` (SQLite stores a NaN float as NULL); ±inf as the float.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    key = models.CharField(max_length=250)
    value = models.FloatField()
    is_nan = models.BooleanField(default=False)
    timestamp = models.BigIntegerField()
    step = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["run", "key", "step", "timestamp"], name="metric_run_key_step_idx")
        ]

    def __str__(self):
        return f"{self.key}[{self.step}]"


class LatestMetric(models.Model):
    """The latest value of each metric of a run (highest step, then latest timestamp):
    what a run shows and what the search's `metrics.x > …` compares, one row a key."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="latest_metrics")
    key = models.CharField(max_length=250)
    value = models.FloatField()
    is_nan = models.BooleanField(default=False)
    timestamp = models.BigIntegerField()
    step = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="latestmetric_unique_key")
        ]
        indexes = [models.Index(fields=["key", "value"], name="latestmetric_key_value_idx")]

    def __str__(self):
        return self.key


class MetricRollup(models.Model):
    """A metric's values summed up per block of ROLLUP_STEPS steps (min, max, count),
    kept in step with every write: a chart of a long history reads these few rows
    instead of every point (tracking.services.metrics.sampled_history)."""

    ROLLUP_STEPS = 256

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_rollups")
    key = models.CharField(max_length=250)
    block = models.BigIntegerField()  # step // ROLLUP_STEPS
    low = models.FloatField()
    low_step = models.BigIntegerField()
    high = models.FloatField()
    high_step = models.BigIntegerField()
    count = models.BigIntegerField()
    timestamp = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "key", "block"], name="metricrollup_unique_block"
            )
        ]

    def __str__(self):
        return f"{self.key}[{self.block}]"


class RunInput(models.Model):
    """A dataset a run used (`log_inputs`), as the client described it."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="inputs")
    dataset = models.JSONField(default=dict)
    tags = models.JSONField(default=list)
    digest = models.CharField(max_length=64, blank=True)
    name = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "name", "digest"], name="runinput_unique_dataset"
            )
        ]

    def __str__(self):
        return self.name


class LoggedModelQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "experiment__project")


def new_model_id() -> str:
    return f"m-{uuid.uuid4().hex}"


class LoggedModel(InExperiment, models.Model):
    """An MLflow 3 logged model: the files `log_model` writes, with their run and status.

    Params and tags are small key/value maps, kept as JSON objects."""

    model_id = models.CharField(max_length=64, unique=True, default=new_model_id)
    experiment = models.ForeignKey(
        Experiment, on_delete=models.CASCADE, related_name="logged_models"
    )
    name = models.CharField(max_length=250)
    model_type = models.CharField(max_length=250, blank=True)
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="logged_models"
    )
    source_run_id = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=32, default="LOGGED_MODEL_PENDING")
    status_message = models.CharField(max_length=500, blank=True)
    params = models.JSONField(default=dict, blank=True)
    tags = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    lifecycle_stage = models.CharField(
        max_length=8, choices=Lifecycle.choices, default=Lifecycle.ACTIVE
    )
    creation_timestamp_ms = models.BigIntegerField(default=now_ms)
    last_updated_timestamp_ms = models.BigIntegerField(default=now_ms)

    objects = LoggedModelQuerySet.as_manager()

    class Meta:
        ordering = ["-creation_timestamp_ms", "-pk"]

    def __str__(self):
        return self.model_id

    @property
    def artifact_uri(self) -> str:
        return f"mlflow-artifacts:/{self.experiment_id}/models/{self.model_id}/artifacts"


class RegistryTag(models.Model):
    """MLflow's key/value tags on a registered model (version None) or one of its versions
    (the hub's own tags are plain labels)."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="mlflow_tags")
    version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.CASCADE, related_name="mlflow_tags"
    )
    key = models.CharField(max_length=250)
    value = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["model", "version", "key"], name="registrytag_unique_key"
            )
        ]

    def __str__(self):
        return self.key


class RegistryVersionSource(models.Model):
    """Where an MLflow-registered version's files came from: the source URI, its run and
    logged model, as `MlflowClient` shows them."""

    version = models.OneToOneField(
        ModelVersion, on_delete=models.CASCADE, related_name="mlflow_source"
    )
    source = models.CharField(max_length=1000)
    run_id = models.CharField(max_length=64, blank=True)
    model_id = models.CharField(max_length=64, blank=True)

    def __str__(self):
        return self.source
