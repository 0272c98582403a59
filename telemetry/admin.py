from django.contrib import admin

from core.admin import ReadOnlyAdmin
from telemetry.models import GpuUsageDay, IdlePolicy, IdleWatch


@admin.register(IdlePolicy)
class IdlePolicyAdmin(ReadOnlyAdmin):
    """Changed on the project's idle-policy page (telemetry.services.set_idle_policy)."""

    list_display = [
        "project",
        "enabled",
        "threshold_percent",
        "idle_minutes",
        "grace_minutes",
        "kinds",
    ]
    list_filter = ["enabled", "kinds"]
    search_fields = ["project__slug", "project__tenant__slug"]


@admin.register(IdleWatch)
class IdleWatchAdmin(ReadOnlyAdmin):
    list_display = ["job", "warned_at", "stop_at", "stopped_at", "message"]
    list_filter = ["stopped_at"]


@admin.register(GpuUsageDay)
class GpuUsageDayAdmin(ReadOnlyAdmin):
    list_display = ["job", "day", "samples", "utilization_sum", "memory_max_mb"]
    date_hierarchy = "day"
