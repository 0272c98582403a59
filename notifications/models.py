"""Who hears of what: subscriptions (a channel and the events it wants) and deliveries
(one row per message to one subscription, retried until delivered or given up)."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from projects.models import Project


class Event(models.TextChoices):
    SUCCEEDED = "job.succeeded", "Job succeeded"
    FAILED = "job.failed", "Job failed"
    PREEMPTED = "job.preempted", "Job preempted"
    LOST = "job.lost", "Job lost"
    WAITING_LONG = "job.waiting_long", "Job waiting longer than the threshold"
    IDLE_WARNING = "job.idle_warning", "Notebook or GPU job about to be stopped for idleness"
    QUOTA_NEARLY_FULL = "quota.nearly_full", "Quota nearly full"


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Signed webhook (JSON)"
    SLACK = "slack", "Slack / Mattermost incoming webhook"


class SubscriptionQuerySet(models.QuerySet):
    def visible_to(self, user):
        """A user's own subscriptions, and the project subscriptions of projects they
        maintain (their URLs may carry secrets: a Slack hook's path is one)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.filter(Q(user=user) | Q(user__isnull=True))
        from projects.permissions import project_roles_of, tenant_roles_of

        admin_of = [t for t, role in tenant_roles_of(user).items() if role in ("owner", "admin")]
        maintains = [p for p, role in project_roles_of(user).items() if role == "maintainer"]
        return self.filter(
            Q(user=user)
            | Q(user__isnull=True, project__tenant_id__in=admin_of)
            | Q(user__isnull=True, project_id__in=maintains)
        )


class Subscription(models.Model):
    """One channel that hears of some events.

    A project subscription (`user` empty) hears of every job of its project and is run by
    the project's maintainers. A personal one (`user` set) hears of the user's own jobs, or
    of every job of `project` when one is named, and only while the user may see the job.
    """

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="subscriptions"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="subscriptions",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    name = models.CharField(max_length=100)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    url = models.URLField(max_length=500, blank=True)
    email = models.EmailField(blank=True)
    # The HMAC key of a signed webhook: shown once when made, kept to sign each delivery.
    secret = models.CharField(max_length=64, blank=True)
    events = models.JSONField(default=list)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # An email subscription hears nothing until its address is confirmed: at once when it
    # is its creator's own, else when someone follows the link mailed to it.
    email_confirmed_at = models.DateTimeField(null=True, blank=True)

    objects = SubscriptionQuerySet.as_manager()

    class Meta:
        ordering = ["name", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False) | Q(project__isnull=False),
                name="subscription_has_owner",
            )
        ]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("notifications:subscription_detail", args=[self.pk])

    @property
    def tenant(self):
        return self.project.tenant if self.project_id else None

    @property
    def personal(self) -> bool:
        return self.user_id is not None

    @property
    def target(self) -> str:
        return self.email if self.channel == Channel.EMAIL else self.url

    @property
    def awaits_confirmation(self) -> bool:
        return self.channel == Channel.EMAIL and self.email_confirmed_at is None


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILING = "failing", "Failing"


class DeliveryQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(subscription__in=Subscription.objects.visible_to(user))


class Delivery(models.Model):
    """One message to one subscription. Pending until sent; a failed attempt waits
    `next_attempt_at` (exponential backoff) and after the last one the row is failing.
    Deliveries of one subscription for one job go out in id order."""

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, null=True, related_name="+")
    event = models.CharField(max_length=32, choices=Event.choices)
    message = models.TextField(blank=True)
    payload = models.JSONField(default=dict)
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # A worker sending this row holds it until then (two workers never send it twice).
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-pk"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self):
        return f"{self.event} to {self.subscription}"


class ProjectAlertSettings(models.Model):
    """A project's thresholds: how long a job may wait before its people hear of it."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="alert_settings")
    waiting_minutes = models.PositiveIntegerField(default=60)

    def __str__(self):
        return f"alert settings of {self.project}"


class AlertSent(models.Model):
    """An alert a periodic check already raised (`waiting:job:<id>`, `quota:tenant:<id>`),
    so each is raised once; a quota alert's row goes when usage falls back."""

    key = models.CharField(max_length=100, unique=True)
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.key
