"""Jobs, their workers, timeline, logs, metrics and output files.

Every row hangs off a Job, and every Job off a Project, so `visible_to(user)`
is always "the project is visible to the user".
"""

import hashlib
import json

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from core.links import object_url
from images.models import RuntimeImage
from images.reference import InvalidReference, parse_reference
from jobs.states import BADGES, TERMINAL, JobState
from projects.models import Project, in_visible_projects


class JobKind(models.TextChoices):
    TRAIN = "train", "Training / prediction"
    DISTRIBUTED = "distributed", "Distributed training"
    NOTEBOOK = "notebook", "Notebook (JupyterLab)"


class JobQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class Job(models.Model):
    """One unit of work: a spec (command, parameters, resources) and its run state.

    A retry keeps the same Job (attempt + 1, same logs and metrics, which continue
    their sequence numbers); "retry" in the UI and clone-and-edit make a new Job
    from this one's spec.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.TRAIN)
    # Spec.
    runtime = models.CharField(
        max_length=500,
        blank=True,
        help_text="Local backend: a Python interpreter or a virtualenv; blank = Gantry's own.",
    )
    command = models.TextField(blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    env = models.JSONField(default=dict, blank=True)
    gpus = models.PositiveIntegerField("GPUs", default=0)
    cpus = models.PositiveIntegerField("CPUs", default=1)
    memory_mb = models.PositiveIntegerField("memory (MiB)", default=1024)
    workers = models.PositiveIntegerField(default=1)
    inputs = models.JSONField(default=list, blank=True)
    # The code the job runs: staged into its working directory before the command starts.
    # RESTRICT, not PROTECT: a snapshot a job ran stays while the job does, but deleting
    # the project takes both (its jobs and snapshots cascade from it together).
    code_snapshot = models.ForeignKey(
        "snapshots.CodeSnapshot",
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="jobs",
    )
    outputs_dir = models.CharField(max_length=200, default="outputs")
    timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_retries = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    priority = models.IntegerField(default=0)
    cloned_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )
    # Run state (written only through jobs.states.transition and the services).
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    state_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    queued_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    token_hash = models.CharField(max_length=64, blank=True, editable=False)
    backend = models.CharField(max_length=32, default="local")
    placement = models.JSONField(default=dict, blank=True)
    # Preemption: asked to stop to make room (it goes back to the queue, not to failed),
    # and how often that happened to this job.
    preempt_requested_at = models.DateTimeField(null=True, blank=True)
    preemptions = models.PositiveIntegerField(default=0)
    # Notebooks: the last proxied request (interactive/proxy.py updates it); idle notebooks stop.
    last_activity_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["state", "priority", "queued_at"], name="job_queue_idx"),
            # The job list, newest first, per visible project, and filtered by state: with
            # the id included, a page's ids and the count come from the index alone
            # (core/paging.py). PostgreSQL only; elsewhere plain indexes.
            models.Index(fields=["project", "-created_at"], include=["id"], name="job_project_idx"),
            models.Index(
                fields=["project", "state", "-created_at"],
                include=["id"],
                name="job_project_state_idx",
            ),
            # Admission's fair-share history: GPU jobs that ran and finished recently
            # (scheduling.admission.fair_share_history). Without it every pass read the whole table.
            models.Index(
                fields=["finished_at"],
                condition=models.Q(gpus__gt=0, started_at__isnull=False),
                name="job_gpu_usage_idx",
            ),
        ]

    def __str__(self):
        return f"#{self.pk} {self.name}"

    def get_absolute_url(self):
        return object_url("jobs:job_detail", self.pk)

    # The scheduler's view of a queued job lives in its own row (JobScheduling), written
    # by every admission pass; these read it (None while the job has none).
    @property
    def queue_position(self) -> int | None:
        row = getattr(self, "scheduling", None)
        return row.queue_position if row else None

    @property
    def estimated_start_at(self):
        row = getattr(self, "scheduling", None)
        return row.estimated_start_at if row else None

    @property
    def image_reference(self) -> str:
        """The image to run in, pinned to its digest (registry/repository@sha256:…), or ""
        when the job names none (a container backend then uses its default image)."""
        record = getattr(self, "image_record", None)
        return record.pinned_reference if record else ""

    @property
    def tenant(self):
        return self.project.tenant

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def state_badge(self) -> str:
        return BADGES.get(self.state, "text-bg-secondary")

    @staticmethod
    def hash_token(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()


class JobScheduling(models.Model):
    """The scheduler's view of one queued job: its place in the queue and when it should
    start, rewritten by every admission pass (`scheduling.admission`) where they change.

    A row of its own, not columns of `Job`: the pass rewrites thousands of positions when
    a job near the head leaves, and those writes stay off the job's row, which the
    lifecycle, the executor's reports and the pages use. The row exists while the pass
    has explained the job, until it leaves the queue (`jobs.states.transition` deletes
    it). (Preemption's `preempt_requested_at` and
    `preemptions` stay on `Job`: the lifecycle asks for a stop and requeues in one
    conditional UPDATE of the job's row, beside `cancel_requested_at`.)
    """

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="scheduling"
    )
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "job scheduling"

    def __str__(self):
        return f"job {self.job_id}: position {self.queue_position}"


class JobWorkerQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")


class JobWorker(models.Model):
    """One process of a job (rank 0 … workers-1), reused across attempts.

    `pid` + `pid_start_time` identify the executor process (a recycled pid has a
    different start time); `child_pid` is the command's process group.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="worker_set")
    rank = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, default="pending")
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    pid_start_time = models.BigIntegerField(null=True, blank=True)
    child_pid = models.IntegerField(null=True, blank=True)
    child_start_time = models.BigIntegerField(null=True, blank=True)
    launched_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_log_seq = models.BigIntegerField(default=0)  # the executor's numbering
    # Lines Gantry itself wrote into this worker's log (jobs.services.system_log): a
    # stored line's seq is the executor's plus the offset when it arrived, so Gantry's
    # lines and the executor's never share a seq and stay in order.
    log_seq_offset = models.BigIntegerField(default=0)
    last_metric_seq = models.BigIntegerField(default=0)
    workdir = models.CharField(max_length=500, blank=True)
    host = models.CharField(max_length=200, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    # Server-side only: never serialized to the API or rendered in templates.
    notebook_token = models.CharField(max_length=100, blank=True, editable=False)

    objects = JobWorkerQuerySet.as_manager()

    class Meta:
        ordering = ["job", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "rank"], name="jobworker_unique_rank")
        ]

    def __str__(self):
        return f"{self.job} worker {self.rank}"

    @property
    def project(self):
        return self.job.project


class JobEventQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")


class JobEvent(models.Model):
    """One state transition of a job: the timeline on the job page."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    reason = models.CharField(max_length=500, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = JobEventQuerySet.as_manager()

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self):
        return f"{self.job}: {self.from_state or '—'} → {self.to_state}"


class LogChunkQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")


class LogChunk(models.Model):
    """One batch of log lines from one worker, as received (JSON lines in `data`).

    One row per batch, not per line: ingestion stays one INSERT per request, and a
    later issue can move chunks to object storage unchanged.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_chunks")
    worker = models.PositiveIntegerField(default=0)
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    line_count = models.PositiveIntegerField()
    data = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    objects = LogChunkQuerySet.as_manager()

    class Meta:
        ordering = ["job", "worker", "first_seq"]
        indexes = [models.Index(fields=["job", "worker", "last_seq"], name="logchunk_seq_idx")]

    def __str__(self):
        return f"{self.job} worker {self.worker} lines {self.first_seq}–{self.last_seq}"

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.data.splitlines() if line]


class MetricPointQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")


class MetricPoint(models.Model):
    """One metric value (loss, accuracy, …) at one step of one worker."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metrics")
    worker = models.PositiveIntegerField(default=0)
    seq = models.BigIntegerField(default=0)
    name = models.CharField(max_length=200)
    step = models.BigIntegerField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    ts = models.DateTimeField()

    objects = MetricPointQuerySet.as_manager()

    class Meta:
        ordering = ["job", "name", "step", "pk"]
        indexes = [models.Index(fields=["job", "name", "step"], name="metric_job_name_step_idx")]

    def __str__(self):
        return f"{self.job} {self.name}[{self.step}]={self.value}"


class ArtifactQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")


class Artifact(models.Model):
    """A file a job wrote under its outputs directory, kept in the default storage
    under `jobs/<job id>/outputs/…` (other ranks than 0 under `worker-<rank>/`)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="artifacts")
    worker = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=1000)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(max_length=1200, upload_to="jobs/")
    created_at = models.DateTimeField(default=timezone.now)

    objects = ArtifactQuerySet.as_manager()

    class Meta:
        ordering = ["job", "worker", "path"]
        constraints = [
            models.UniqueConstraint(fields=["job", "worker", "path"], name="artifact_unique_path")
        ]

    def __str__(self):
        return self.path if not self.worker else f"worker-{self.worker}/{self.path}"

    def get_absolute_url(self):
        return reverse("jobs:artifact_download", args=[self.pk])

    @property
    def project(self):
        return self.job.project

    @property
    def tenant(self):
        return self.job.project.tenant


class JobImageQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")


class JobImage(models.Model):
    """The image a job ran with, pinned to the digest resolved when it was submitted.

    Jobs' table (jobs -> images is the allowed arrow): it moved here from the images app,
    keeping its table, images_jobimage, so no data moved.
    """

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="image_record")
    image = models.ForeignKey(
        RuntimeImage, null=True, blank=True, on_delete=models.SET_NULL, related_name="job_records"
    )
    reference = models.CharField(max_length=500)
    digest = models.CharField(max_length=135, blank=True)

    objects = JobImageQuerySet.as_manager()

    class Meta:
        db_table = "images_jobimage"

    def __str__(self):
        return f"{self.job}: {self.reference}@{self.digest or '?'}"

    @property
    def pinned_reference(self) -> str:
        """registry/repository@digest (what a container backend pulls), else the reference."""
        if not self.digest:
            return self.reference
        try:
            ref = parse_reference(self.reference)
        except InvalidReference:
            return self.reference
        return f"{ref.registry}/{ref.repository}@{self.digest}"

    @property
    def runtime_note(self) -> str:
        """On the local backend (no containers) what a job with an image really ran with."""
        job = self.job
        if job.backend != "local":
            return ""
        local_env = self.image.local_env if self.image else ""
        if local_env and job.runtime == local_env:
            return ""
        runtime = job.runtime or "Gantry's own Python"
        return (
            f"The local backend runs no containers: this job ran with {runtime}, "
            "not inside the image (give the image a local environment to run with it here)."
        )

    @property
    def project(self):
        return self.job.project
