from django.contrib import admin

from notifications.models import AlertSent, Delivery, ProjectAlertSettings, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["name", "channel", "project", "user", "active", "created_at"]
    list_filter = ["channel", "active"]
    search_fields = ["name", "url", "email", "project__slug", "user__username"]
    raw_id_fields = ["project", "user", "created_by"]
    exclude = ["secret"]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """The delivery log: read-only, a record of what was sent."""

    list_display = ["pk", "event", "subscription", "job", "state", "attempts", "last_status", "created_at"]
    list_filter = ["state", "event"]
    search_fields = ["subscription__name", "job__name", "last_error"]
    raw_id_fields = ["subscription", "job"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


admin.site.register(ProjectAlertSettings)
admin.site.register(AlertSent)
