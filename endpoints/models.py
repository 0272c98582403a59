"""Model endpoints: a registered model served over HTTP, through Gantry's gateway.

An Endpoint belongs to a project and serves one registered model, either a fixed version
or whatever an alias ("champion") points at; an optional canary alias takes a share of
the requests. `serving_version` / `canary_serving_version` are what answers now: the
gateway moves them only once a replica of the new version is ready (endpoints/rollout.py),
so an alias move never drops a request.
"""

from django.conf import settings
from django.db import models, transaction
from django.urls import reverse
from django.utils import timezone

from modelhub.models import ModelVersion, RegisteredModel
from projects.models import Project, in_visible_projects


class EndpointState(models.TextChoices):
    STARTING = "starting", "Starting"
    READY = "ready", "Ready"
    SCALED_TO_ZERO = "scaled-to-zero", "Scaled to zero"
    FAILED = "failed", "Failed"


class EndpointQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)

    def lock_for_delete(self) -> list[int]:
        """Lock these endpoints' rows (PostgreSQL) until the caller's transaction ends,
        before a delete that takes them collects what goes with them; their ids. The
        gateway's traffic flush (endpoints.traffic) and the replicas' usage records
        (endpoints.usage) write rows under an endpoint meanwhile, after locking it: locked
        here first, a flush under way finishes before the delete collects its rows, and a
        later one waits and leaves the endpoint out. Unlocked, a row written between the
        delete's cascade and its commit fails the commit on the foreign key. Every delete
        that reaches endpoints takes this lock: their own (`delete_locked`) and their
        project's, tenant's or model's (core.registry.before_cascade)."""
        return list(self.select_for_update().values_list("pk", flat=True))

    def delete_locked(self):
        """Delete these endpoints with their rows locked first (`lock_for_delete`)."""
        with transaction.atomic(using=self.db):
            self.lock_for_delete()
            return self.delete()


class Endpoint(models.Model):
    """A project's HTTP endpoint for one registered model (a version, or an alias's)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="endpoints")
    name = models.SlugField(max_length=50)
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="endpoints")
    alias = models.CharField(max_length=64, blank=True, help_text="Follow this alias.")
    version = models.ForeignKey(
        ModelVersion,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Serve this version (when no alias is followed).",
    )
    canary_alias = models.CharField(max_length=64, blank=True)
    canary_percent = models.PositiveSmallIntegerField(default=0)
    replicas = models.PositiveSmallIntegerField(default=1)
    cpus = models.PositiveSmallIntegerField(default=1)
    memory_mb = models.PositiveIntegerField(default=1024)
    gpus = models.PositiveSmallIntegerField(default=0)
    idle_seconds = models.PositiveIntegerField(
        default=900, help_text="Scale to zero after this long without a request (0: never)."
    )
    rate_limit = models.PositiveIntegerField(
        default=100, help_text="Requests per second the gateway lets through (0: no limit)."
    )
    backend = models.CharField(max_length=16, default="local")
    state = models.CharField(
        max_length=16, choices=EndpointState.choices, default=EndpointState.SCALED_TO_ZERO
    )
    state_reason = models.CharField(max_length=500, blank=True)
    serving_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    canary_serving_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_cold_start_ms = models.FloatField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = EndpointQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="endpoint_unique_name"),
        ]

    def __str__(self):
        return f"{self.project}/{self.name}"

    def get_absolute_url(self):
        return reverse("endpoints:endpoint_detail", args=[self.pk])

    @property
    def tenant(self):
        return self.project.tenant

    @property
    def gateway_path(self) -> str:
        return f"/serve/{self.project.tenant.slug}/{self.project.slug}/{self.name}/"


class EndpointTokenQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user, field="endpoint__project")


class EndpointToken(models.Model):
    """A token that calls one endpoint and nothing else (for another service). Only a
    SHA-256 of the secret is stored; the secret is shown once."""

    PREFIX = "gep_"

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    key_prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = EndpointTokenQuerySet.as_manager()

    def __str__(self):
        return f"{self.name} ({self.key_prefix}…)"

    @property
    def project(self):
        return self.endpoint.project


class EndpointRequest(models.Model):
    """One call through the gateway: status and timing, never the bodies. The last
    traffic.LOG_LENGTH per endpoint are kept."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="requests")
    at = models.DateTimeField(default=timezone.now)
    version_number = models.PositiveIntegerField(null=True)
    canary = models.BooleanField(default=False)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=200)
    status = models.PositiveSmallIntegerField()
    latency_ms = models.FloatField()
    cold_start = models.BooleanField(default=False)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["endpoint", "-at"], name="endpoint_request_recent")]

    def __str__(self):
        return f"{self.endpoint} {self.method} {self.path} {self.status}"


class EndpointVersionStats(models.Model):
    """Running totals per endpoint and model version: requests, errors, latency."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="stats")
    version_number = models.PositiveIntegerField()
    requests = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    latency_ms_total = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "version_number"], name="endpoint_stats_unique_version"
            ),
        ]

    def __str__(self):
        return f"{self.endpoint} v{self.version_number}: {self.requests} requests"


class ReplicaIntervalQuerySet(models.QuerySet):
    def visible_to(self, user):
        return in_visible_projects(self, user)


class ReplicaInterval(models.Model):
    """A stretch of time `replicas` replicas of an endpoint ran, each holding `gpus` GPUs:
    what usage reports count (replica-hours, GPU-hours). The local backend records one
    per replica process (endpoints.usage): opened when Gantry starts it, closed when Gantry
    stops it or finds it gone (scaled to zero after its idle time, or exited). It stays
    with the project when the endpoint is deleted, so a lab still sees what serving cost."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    endpoint = models.ForeignKey(
        Endpoint, null=True, on_delete=models.SET_NULL, related_name="replica_intervals"
    )
    endpoint_name = models.SlugField(max_length=50)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The endpoint's creator: usage reports by person count it theirs.",
    )
    version_number = models.PositiveIntegerField(null=True)
    replica = models.CharField(max_length=64, help_text="The replica's name on its backend.")
    pid = models.PositiveIntegerField(null=True)
    process_start = models.PositiveBigIntegerField(
        null=True, help_text="The process's start in clock ticks since boot (with pid: which one)."
    )
    replicas = models.PositiveSmallIntegerField(default=1)
    gpus = models.PositiveSmallIntegerField(default=0, help_text="GPUs per replica.")
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(help_text="Last found running.")
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = ReplicaIntervalQuerySet.as_manager()

    class Meta:
        ordering = ["started_at", "pk"]
        indexes = [
            models.Index(fields=["started_at"], name="replica_interval_started"),
            models.Index(
                fields=["replica"], condition=models.Q(ended_at=None), name="replica_interval_open"
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["replica", "pid", "process_start"], name="replica_interval_one_process"
            ),
        ]

    def __str__(self):
        return f"{self.endpoint_name} {self.replica} {self.started_at:%Y-%m-%d %H:%M}–"
