from django.contrib import admin

from scheduling.models import TenantQuota


@admin.register(TenantQuota)
class TenantQuotaAdmin(admin.ModelAdmin):
    list_display = ["tenant", "guaranteed_gpus", "borrow_limit_gpus", "max_cpus", "max_memory_mb", "max_jobs", "weight", "updated_at"]
    search_fields = ["tenant__name", "tenant__slug"]
    list_select_related = ["tenant"]
    autocomplete_fields = ["tenant"]

    def save_model(self, request, obj, form, change):
        # Through the service, so the change is audited like any other.
        from scheduling.services import QUOTA_FIELDS, set_tenant_quota

        quota, warnings = set_tenant_quota(
            actor=request.user, tenant=obj.tenant, **{name: getattr(obj, name) for name in QUOTA_FIELDS}
        )
        obj.pk = quota.pk
        for warning in warnings:
            self.message_user(request, warning, level="warning")
