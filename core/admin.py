from django.contrib import admin

from core.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only."""

    list_display = ["created_at", "actor_name", "action", "object_repr", "tenant", "ip_address"]
    list_filter = ["action", "tenant"]
    search_fields = ["actor_name", "object_repr", "action"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
