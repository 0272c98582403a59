from django.contrib import admin

from cluster.models import KubernetesCluster


@admin.register(KubernetesCluster)
class KubernetesClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "is_default", "in_cluster", "context", "namespace_prefix", "created_at"]
    search_fields = ["name"]
    actions = ["check_connection"]

    @admin.action(description="Check the connection (list the nodes)")
    def check_connection(self, request, queryset):
        from jobs.backends.kubernetes import check_cluster

        for cluster in queryset:
            ok, text = check_cluster(cluster)
            self.message_user(request, f"{cluster.name}: {text}", level="success" if ok else "error")
