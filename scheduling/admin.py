from django.contrib import admin

from cluster.models import KubernetesCluster
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


# Registered here, not in cluster: checking a connection asks the Kubernetes backend
# (jobs), and cluster never imports jobs.
@admin.register(KubernetesCluster)
class KubernetesClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "is_default", "in_cluster", "context", "namespace_prefix", "created_at"]
    search_fields = ["name"]
    actions = ["check_connection"]

    @admin.action(description="Check the connection (list the nodes)")
    def check_connection(self, request, queryset):
        from jobs.compute.kubernetes.client import check_cluster

        for cluster in queryset:
            ok, text = check_cluster(cluster)
            self.message_user(request, f"{cluster.name}: {text}", level="success" if ok else "error")
