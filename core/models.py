from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEventQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Lab administrators see everything; tenant owners and admins their tenant's events."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self
        # The tenant model (accounts) sits above core: it says which tenants a user runs.
        tenants = self.model._meta.get_field("tenant").related_model.objects
        return self.filter(tenant_id__in=tenants.administered_by(user).values("pk"))


class AuditEvent(models.Model):
    """An append-only record of a sensitive action: who did what, to what, when, from where."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    tenant = models.ForeignKey(
        "accounts.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    details = models.JSONField(default=dict, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_repr}"
        )
