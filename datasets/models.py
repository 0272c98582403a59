"""Datasets, their immutable versions, content-addressed blobs and resumable uploads.

Storage layout (in the default storage, filesystem or S3):
    blobs/<aa>/<sha256>                 one object per distinct content, shared by every
                                        version (and every tenant) that holds it
    uploads/<staging id>/<file>/<part>  filesystem backend: parts of an upload in progress
    uploads/<staging id>/<file>         S3 backend: the multipart upload's object

The manifest of a version is rows (`DatasetFile`), not a JSON document: a version of
100 000 files is browsed a page at a time through the (version, path) index, a new
version copies its parent's rows in batches with one INSERT each, and garbage
collection of blobs is one anti-join rather than a scan of every manifest.
"""

import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from accounts.models import Tenant
from projects.models import Project, in_visible_projects


class DatasetQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class Dataset(models.Model):
    """A named, versioned collection of files in a project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50)
    description = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True)
    licence = models.CharField(max_length=100, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = DatasetQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "slug"], name="dataset_unique_slug")
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("datasets:dataset_detail", args=[self.pk])

    @property
    def tenant(self):
        return self.project.tenant

    def latest_version(self):
        return self.versions.order_by("-number").first()


class Blob(models.Model):
    """One distinct content, stored once at `blobs/<aa>/<sha256>`.

    Not reference-counted: `datasets.tasks.collect_garbage` deletes blobs no file
    refers to (after a grace period, so a commit in flight keeps its blobs).
    """

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return self.sha256

    @property
    def key(self) -> str:
        return blob_key(self.sha256)


def blob_key(sha256: str) -> str:
    return f"blobs/{sha256[:2]}/{sha256}"


class VersionSource(models.TextChoices):
    UPLOAD = "upload", "Upload"
    ARCHIVE = "archive", "Archive"
    COPY = "copy", "Copy of a version"
    JOB_OUTPUT = "job_output", "Job output"
    BUCKET = "bucket", "Copy of a bucket prefix"


class DatasetVersionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "dataset__project")


class DatasetVersion(models.Model):
    """A committed, immutable set of files. Born complete: a version row is only ever
    created, together with all its files, in one transaction (`services.versions.create_version`)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    source = models.CharField(max_length=16, choices=VersionSource.choices)
    source_detail = models.JSONField(default=dict, blank=True)
    message = models.CharField(max_length=500, blank=True)
    file_count = models.PositiveIntegerField(default=0)
    total_size = models.BigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = DatasetVersionQuerySet.as_manager()

    class Meta:
        ordering = ["dataset", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="datasetversion_unique")
        ]

    def __str__(self):
        return f"{self.dataset.name} v{self.number}"

    def get_absolute_url(self):
        return reverse("datasets:version_detail", args=[self.pk])

    @property
    def project(self):
        return self.dataset.project

    @property
    def tenant(self):
        return self.dataset.project.tenant


class DatasetFileQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(version__in=DatasetVersion.objects.visible_to(user))


class DatasetFile(models.Model):
    """One entry of a version's manifest: a relative path and the blob it holds."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024)
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="files")
    size = models.BigIntegerField()

    objects = DatasetFileQuerySet.as_manager()

    class Meta:
        ordering = ["version", "path"]
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="datasetfile_unique_path")
        ]

    def __str__(self):
        return self.path

    def get_absolute_url(self):
        return reverse("datasets:file_detail", args=[self.pk])

    @property
    def sha256(self) -> str:
        return self.blob_id

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def project(self):
        return self.version.dataset.project

    @property
    def tenant(self):
        return self.version.dataset.project.tenant


class StorageQuota(models.Model):
    """A tenant's dataset storage limit; tenants without a row get
    `GANTRY_TENANT_STORAGE_QUOTA_GB`."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="storage_quota")
    bytes = models.BigIntegerField()

    def __str__(self):
        return f"{self.tenant}: {self.bytes} bytes"


class UploadState(models.TextChoices):
    OPEN = "open", "Uploading"
    COMMITTING = "committing", "Committing"
    COMMITTED = "committed", "Committed"
    FAILED = "failed", "Failed"
    ABORTED = "aborted", "Aborted"


class UploadSessionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, "dataset__project")


class UploadSession(models.Model):
    """A version being built: files to add (uploaded in parts) on top of a parent version,
    minus the paths to remove. Committed in one step into a `DatasetVersion`."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="uploads")
    parent = models.ForeignKey(
        DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Names the staging folder: unique even where databases restart their ids (tests, restores).
    staging_id = models.UUIDField(default=uuid.uuid4, editable=False, unique=True)
    remove_paths = models.JSONField(default=list, blank=True)
    message = models.CharField(max_length=500, blank=True)
    backend = models.CharField(max_length=16)  # "filesystem" or "s3", fixed at start
    part_size = models.PositiveBigIntegerField()
    reserved_bytes = models.BigIntegerField(default=0)
    state = models.CharField(max_length=16, choices=UploadState.choices, default=UploadState.OPEN)
    error = models.TextField(blank=True)
    version = models.OneToOneField(
        DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="upload"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = UploadSessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"upload #{self.pk} to {self.dataset}"

    def get_absolute_url(self):
        return reverse("datasets:upload_detail", args=[self.pk])

    @property
    def staging_prefix(self) -> str:
        return f"uploads/{self.staging_id.hex}"

    @property
    def project(self):
        return self.dataset.project

    @property
    def tenant(self):
        return self.dataset.project.tenant


class UploadFile(models.Model):
    """One file of an upload session, split into `part_count` parts of the session's part size."""

    session = models.ForeignKey(UploadSession, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024)
    size = models.BigIntegerField()
    part_count = models.PositiveIntegerField()
    s3_upload_id = models.CharField(max_length=500, blank=True)
    blob = models.ForeignKey(
        Blob, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["session", "path"]
        constraints = [
            models.UniqueConstraint(fields=["session", "path"], name="uploadfile_unique_path")
        ]

    def __str__(self):
        return self.path

    @property
    def staging_key(self) -> str:
        return f"{self.session.staging_prefix}/{self.pk}"


class UploadPart(models.Model):
    """A part that arrived: its size and the sha256 the client declared (checked on
    arrival for the filesystem backend, at commit for S3)."""

    file = models.ForeignKey(UploadFile, on_delete=models.CASCADE, related_name="parts")
    number = models.PositiveIntegerField()
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    etag = models.CharField(max_length=200, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["file", "number"]
        constraints = [
            models.UniqueConstraint(fields=["file", "number"], name="uploadpart_unique_number")
        ]

    def __str__(self):
        return f"{self.file.path} part {self.number}"


class ArchiveImport(models.Model):
    """An uploaded zip / tar / tar.gz waiting to be unpacked into a version by a task."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="archives")
    parent = models.ForeignKey(
        DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    file_name = models.CharField(max_length=255)
    staging_key = models.CharField(max_length=500)
    size = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=UploadState.choices, default=UploadState.OPEN)
    error = models.TextField(blank=True)
    version = models.OneToOneField(
        DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="archive"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return self.file_name


class BucketImport(models.Model):
    """Objects under a prefix of the configured bucket, becoming a version in a task."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="bucket_imports")
    parent = models.ForeignKey(
        DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    prefix = models.CharField(max_length=1024)
    state = models.CharField(max_length=16, choices=UploadState.choices, default=UploadState.OPEN)
    error = models.TextField(blank=True)
    files_total = models.IntegerField(default=0)
    files_done = models.IntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    bytes_done = models.BigIntegerField(default=0)
    bytes_copied = models.BigIntegerField(default=0)  # new blobs (the rest were stored already)
    version = models.OneToOneField(
        DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return self.prefix

    @property
    def tenant(self):
        return self.dataset.project.tenant

    @property
    def project(self):
        return self.dataset.project
