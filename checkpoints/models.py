"""Checkpoints: what a running job saved of its progress, so a preempted, retried or
cloned job resumes instead of starting again.

A checkpoint is born `pending` with the list of its files (path, size, sha256); the
executor uploads them into the dataset blob store (`blobs/<aa>/<sha256>`, shared and
content-addressed) and asks to commit. It becomes `complete` only when every file has
arrived with its announced hash (`services.commit_checkpoint`); only complete checkpoints
are listed, staged for a resume or counted as saved progress.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from datasets.models import Blob
from jobs.models import Job
from projects.models import Project, in_visible_projects


class CheckpointState(models.TextChoices):
    PENDING = "pending", "Uploading"
    COMPLETE = "complete", "Complete"


class CheckpointQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "job__project")

    def complete(self):
        return self.filter(state=CheckpointState.COMPLETE)


class Checkpoint(models.Model):
    """One saved state of a job: a folder of files with its step and metrics."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints")
    attempt = models.PositiveIntegerField(default=1)
    name = models.CharField(max_length=200)
    step = models.BigIntegerField(null=True, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=16, choices=CheckpointState.choices, default=CheckpointState.PENDING
    )
    total_size = models.BigIntegerField(default=0)
    # Saved after the job was asked to stop for a preemption (inside the save window).
    on_preemption = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    objects = CheckpointQuerySet.as_manager()

    class Meta:
        ordering = ["-completed_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="checkpoint_job_name_unique")
        ]
        indexes = [models.Index(fields=["job", "state", "-completed_at"], name="checkpoint_job_idx")]

    def __str__(self):
        return f"{self.name} of job #{self.job_id}"

    @property
    def project(self):
        return self.job.project

    @property
    def tenant(self):
        return self.job.project.tenant


class CheckpointFile(models.Model):
    """One file of a checkpoint; `blob` is set once its bytes arrived and matched."""

    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=900)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    blob = models.ForeignKey(
        Blob, null=True, blank=True, on_delete=models.PROTECT, related_name="checkpoint_files"
    )

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["checkpoint", "path"], name="checkpoint_file_unique")
        ]

    def __str__(self):
        return self.path


class RetentionPolicy(models.Model):
    """How many checkpoints a project keeps per job: the last `keep_last` and the best
    `keep_best` by `metric` (lower is better unless `higher_is_better`)."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, related_name="checkpoint_retention"
    )
    keep_last = models.PositiveIntegerField(default=3)
    keep_best = models.PositiveIntegerField(default=1)
    metric = models.CharField(max_length=200, blank=True)
    higher_is_better = models.BooleanField(default=False)

    def __str__(self):
        return f"checkpoint retention of {self.project}"

    @property
    def tenant(self):
        return self.project.tenant


class ResumeSource(models.Model):
    """A job started from a checkpoint (of another job): staged before its first attempt
    when the job has no complete checkpoint of its own."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="resume_source")
    checkpoint = models.ForeignKey(
        Checkpoint, null=True, on_delete=models.SET_NULL, related_name="resumed_by"
    )

    def __str__(self):
        return f"job #{self.job_id} from {self.checkpoint}"
