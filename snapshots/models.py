"""Code snapshots: a directory tree a job runs, uploaded once, file by file.

Each file's content is a `datasets.models.Blob` (the dataset blob store, content
addressed): a file whose content the tenant already holds is never uploaded again. A
snapshot is "pending" while blobs are missing and "ready" once all have arrived; a ready
snapshot never changes (jobs name it, PROTECT keeps it).
"""

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from datasets.models import Blob
from projects.models import Project, in_visible_projects


class SnapshotState(models.TextChoices):
    PENDING = "pending", "Uploading"
    READY = "ready", "Ready"


class CodeSnapshotQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class CodeSnapshot(models.Model):
    """The files of one upload of a directory, with the git state the client saw."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="code_snapshots")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    ready_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(
        max_length=16, choices=SnapshotState.choices, default=SnapshotState.PENDING
    )
    # sha256 of the sorted manifest (path, mode, content): equal trees, equal digests.
    digest = models.CharField(max_length=64)
    file_count = models.PositiveIntegerField(default=0)
    size = models.BigIntegerField(default=0)
    git_commit = models.CharField(max_length=64, blank=True)
    git_dirty = models.BooleanField(null=True, blank=True)
    git_branch = models.CharField(max_length=255, blank=True)

    objects = CodeSnapshotQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["project", "-created_at"], name="snapshot_project_idx")]

    def __str__(self):
        return f"code #{self.pk}"

    def get_absolute_url(self):
        return reverse("snapshots:snapshot_detail", args=[self.pk])

    @property
    def tenant(self):
        return self.project.tenant

    @property
    def is_ready(self) -> bool:
        return self.state == SnapshotState.READY

    @property
    def short_commit(self) -> str:
        return self.git_commit[:10]


class SnapshotFile(models.Model):
    """One file of a snapshot: its path, size, mode and content (`sha256`). `blob` is set
    once the tenant holds that content (it arrived, or was uploaded before)."""

    snapshot = models.ForeignKey(CodeSnapshot, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024)
    size = models.BigIntegerField()
    mode = models.PositiveIntegerField(default=0o644)
    sha256 = models.CharField(max_length=64)
    blob = models.ForeignKey(
        Blob, null=True, blank=True, on_delete=models.PROTECT, related_name="snapshot_files"
    )

    class Meta:
        ordering = ["snapshot", "path"]
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "path"], name="snapshotfile_unique_path")
        ]
        indexes = [models.Index(fields=["sha256"], name="snapshotfile_sha256_idx")]

    def __str__(self):
        return self.path

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def executable(self) -> bool:
        return bool(self.mode & 0o111)
