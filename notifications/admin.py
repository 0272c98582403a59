from django.contrib import admin
from django.db import models

from core.admin import ReadOnlyAdmin, ServiceAdmin
from notifications import services
from notifications.models import AlertSent, Delivery, ProjectAlertSettings, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(ServiceAdmin):
    """Changed and deleted through the services; made on the pages or the API, where a
    webhook's secret is shown once."""

    list_display = ["name", "channel", "project", "user", "active", "created_at"]
    list_filter = ["channel", "active"]
    search_fields = ["name", "url", "email", "project__slug", "user__username"]
    list_select_related = ["project__tenant", "user"]
    fields = ["name", "channel", "project", "user", "url", "email", "events", "active"]
    readonly_fields = ["channel", "project", "user"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def has_add_permission(self, request):
        return False

    def update(self, request, obj, fields):
        changes = {f: getattr(obj, f) for f in fields if f in ("name", "url", "email", "events", "active")}
        services.update_subscription(request.user, obj, **changes)

    def delete(self, request, obj):
        services.delete_subscription(request.user, obj)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: a record of what was sent and how each endpoint answered."""

    list_display = ["pk", "event", "subscription", "job", "state", "attempts", "last_status", "created_at"]
    list_filter = ["state", "event"]
    search_fields = ["subscription__name", "job__name", "last_error"]
    list_select_related = ["subscription", "job"]


@admin.register(ProjectAlertSettings)
class ProjectAlertSettingsAdmin(ReadOnlyAdmin):
    list_display = ["project", "waiting_minutes"]


@admin.register(AlertSent)
class AlertSentAdmin(ReadOnlyAdmin):
    list_display = ["key", "at"]
    search_fields = ["key"]
