"""The model hub: registered models, their immutable versions and files, aliases and tags.

Every row hangs off a RegisteredModel in a Project, so `visible_to(user)` is
"the project is visible to the user".
"""

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from projects.models import Project, in_visible_projects


class ModelFormat(models.TextChoices):
    SAFETENSORS = "safetensors", "safetensors"
    PYTORCH = "pytorch", "PyTorch (.pt / .pth)"
    TORCHSCRIPT = "torchscript", "TorchScript"
    ONNX = "onnx", "ONNX"
    TF_SAVEDMODEL = "tf-savedmodel", "TensorFlow SavedModel"
    KERAS = "keras", "Keras (.keras / .h5)"
    MXNET = "mxnet", "MXNet (.params + -symbol.json)"
    # A directory with an MLmodel file (MLflow's own description: flavors, signature).
    MLFLOW = "mlflow", "MLflow model (MLmodel)"


class RegisteredModelQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class RegisteredModel(models.Model):
    """A named model in a project: its versions, aliases, tags and a Markdown model card."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    description = models.CharField(max_length=500, blank=True)
    card = models.TextField(blank=True, help_text="Markdown: what the model does, data, limits.")
    tags = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = RegisteredModelQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="model_unique_project_name")
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("modelhub:model_detail", args=[self.pk])

    @property
    def tenant(self):
        return self.project.tenant


class ModelVersionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(model__in=RegisteredModel.objects.visible_to(user))


class ModelVersion(models.Model):
    """One immutable version: files, detected format, the producing job's metrics and lineage.

    Lineage is copied when the version is registered (parameters, image digest, the
    job's inputs as given), so it survives the job being deleted.
    """

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    format = models.CharField(max_length=16, choices=ModelFormat.choices)
    primary_file = models.CharField(
        max_length=1000, blank=True, help_text="The file that decided the format."
    )
    description = models.CharField(max_length=500, blank=True)
    tags = models.JSONField(default=list, blank=True)
    size = models.BigIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    source_job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="model_versions"
    )
    parameters = models.JSONField(default=dict, blank=True)
    image_reference = models.CharField(max_length=500, blank=True)
    image_digest = models.CharField(max_length=135, blank=True)
    inputs = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ModelVersionQuerySet.as_manager()

    class Meta:
        ordering = ["model", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="modelversion_unique_number")
        ]

    def __str__(self):
        return f"{self.model.name} v{self.number}"

    def get_absolute_url(self):
        return reverse("modelhub:version_detail", args=[self.pk])

    @property
    def project(self):
        return self.model.project

    @property
    def tenant(self):
        return self.model.project.tenant


class ModelFileQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(version__in=ModelVersion.objects.visible_to(user))


class ModelFile(models.Model):
    """One file of a version, in the default storage under `models/<model>/<version>/`."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1000)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(max_length=1200, upload_to="models/")

    objects = ModelFileQuerySet.as_manager()

    class Meta:
        ordering = ["version", "path"]
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="modelfile_unique_path")
        ]

    def __str__(self):
        return self.path

    @property
    def project(self):
        return self.version.model.project


class AliasQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(model__in=RegisteredModel.objects.visible_to(user))


class Alias(models.Model):
    """A movable name for one version of a model (`production`, `staging`, `candidate`)."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.CharField(max_length=64)
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="aliases")
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    objects = AliasQuerySet.as_manager()

    class Meta:
        ordering = ["model", "name"]
        verbose_name_plural = "aliases"
        constraints = [
            models.UniqueConstraint(fields=["model", "name"], name="alias_unique_model_name")
        ]

    def __str__(self):
        return f"{self.model.name}@{self.name}"

    @property
    def project(self):
        return self.model.project


class AliasMove(models.Model):
    """One move of an alias (set, moved or removed): the alias's history."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="alias_moves")
    alias = models.CharField(max_length=64)
    from_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    to_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self):
        return f"{self.model.name}@{self.alias}: {self.from_version_id} → {self.to_version_id}"
