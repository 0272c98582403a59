"""Runtime images (the environments jobs run in) and custom image builds.

An image is public (the seeded catalog, visible to every tenant, changed only by
lab administrators) or belongs to one tenant. `visible_to(user)` is "public, or
in one of the user's tenants".
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.models import Tenant


class Framework(models.TextChoices):
    PYTORCH = "pytorch", "PyTorch"
    TENSORFLOW = "tensorflow", "TensorFlow"
    MXNET = "mxnet", "MXNet"
    CUSTOM = "custom", "Custom"


class ImageVisibility(models.TextChoices):
    PUBLIC = "public", "Public (all tenants)"
    TENANT = "tenant", "This tenant"


class RuntimeImageQuerySet(models.QuerySet):
    def visible_to(self, user):
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self
        return self.filter(
            Q(visibility=ImageVisibility.PUBLIC) | Q(tenant__in=Tenant.objects.visible_to(user))
        )


class RuntimeImage(models.Model):
    """An OCI image a job can run in, with what is inside it (framework, CUDA, Python).

    `reference` is what the user gave; registry/repository/tag/digest are its parsed
    parts, and `digest` is the resolved manifest digest (a tag moves, a digest does
    not). On the local backend `local_env` (a virtualenv or interpreter) stands in
    for the container.
    """

    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="images"
    )
    visibility = models.CharField(
        max_length=8, choices=ImageVisibility.choices, default=ImageVisibility.TENANT
    )
    name = models.CharField(max_length=200)
    reference = models.CharField(max_length=500)
    registry = models.CharField(max_length=255)
    repository = models.CharField(max_length=255)
    tag = models.CharField(max_length=128, blank=True)
    digest = models.CharField(max_length=135, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    framework = models.CharField(max_length=16, choices=Framework.choices, default=Framework.CUSTOM)
    framework_version = models.CharField(max_length=32, blank=True)
    cuda_version = models.CharField(max_length=16, blank=True, help_text="Blank: CPU only.")
    python_version = models.CharField(max_length=16, blank=True)
    description = models.TextField(blank=True)
    legacy = models.BooleanField(
        default=False, help_text="Retired upstream: kept for old work, not for new."
    )
    local_env = models.CharField(
        max_length=500,
        blank=True,
        help_text="Local backend: a virtualenv or Python interpreter standing in for the image.",
    )
    labels = models.JSONField(default=dict, blank=True)
    built_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = RuntimeImageQuerySet.as_manager()

    class Meta:
        ordering = ["legacy", "framework", "name", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(visibility="public") & Q(tenant__isnull=True))
                | (Q(visibility="tenant") & Q(tenant__isnull=False)),
                name="image_public_xor_tenant",
            ),
            models.UniqueConstraint(fields=["tenant", "name"], name="image_unique_tenant_name"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="image_unique_public_name"
            ),
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("images:image_detail", args=[self.pk])

    @property
    def public_to_all_tenants(self) -> bool:
        return self.visibility == ImageVisibility.PUBLIC

    @property
    def pinned_reference(self) -> str:
        """registry/repository@digest when resolved, else the tag reference."""
        base = f"{self.registry}/{self.repository}"
        if self.digest:
            return f"{base}@{self.digest}"
        return f"{base}:{self.tag}" if self.tag else base

    @property
    def framework_label(self) -> str:
        label = self.get_framework_display()
        return f"{label} {self.framework_version}".strip()


class BuildState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class ImageBuildQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(tenant__in=Tenant.objects.visible_to(user))


class ImageBuild(models.Model):
    """A custom image: a base image plus files and pure-Python packages, as one new layer.

    The build runs as a background task (images.tasks.run_build) that owns `state`,
    `progress` and `log`; the result is a new tenant RuntimeImage.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="image_builds")
    # SET_NULL: a deleted base (or its tenant) must not take other tenants' build history along.
    base = models.ForeignKey(
        RuntimeImage, null=True, on_delete=models.SET_NULL, related_name="builds"
    )
    name = models.CharField(max_length=200)
    target = models.CharField(max_length=500, help_text="The reference the image is pushed to.")
    requirements = models.TextField(blank=True)
    # [{"path": "/opt/app/x.py", "storage": "images/builds/…", "size": …, "sha256": …}]
    files = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=16, choices=BuildState.choices, default=BuildState.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    step = models.CharField(max_length=200, blank=True)
    log = models.TextField(blank=True)
    error = models.CharField(max_length=1000, blank=True)
    result = models.ForeignKey(
        RuntimeImage, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ImageBuildQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"build #{self.pk} {self.name}"

    def get_absolute_url(self):
        return reverse("images:build_detail", args=[self.pk])

    @property
    def is_finished(self) -> bool:
        return self.state in (BuildState.SUCCEEDED, BuildState.FAILED)

    @property
    def state_badge(self) -> str:
        return {
            BuildState.QUEUED: "text-bg-secondary",
            BuildState.RUNNING: "text-bg-info",
            BuildState.SUCCEEDED: "text-bg-success",
            BuildState.FAILED: "text-bg-danger",
        }[self.state]
