from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render

from accounts.models import Tenant
from cluster import services
from cluster.forms import TenantQuotaForm
from cluster.models import TenantQuota
from core.views import GantryView, apply_service_errors
from projects.permissions import AUTHENTICATED


def machine_nodes() -> list[dict]:
    """Nodes with their capacity, from the configured job backend (one node: this machine)."""
    import socket

    from jobs.backends import get_backend

    backend = get_backend()
    capacity = backend.capacity()
    models = sorted({gpu.name for gpu in capacity.gpus if gpu.name})
    return [
        {
            "name": socket.gethostname(),
            "backend": backend.name,
            "cpus": capacity.cpus,
            "memory_mb": capacity.memory_mb,
            "gpus": capacity.gpu_count,
            "gpu_model": ", ".join(models),
        }
    ]


class ClusterOverviewView(GantryView):
    """Nodes and GPUs, and the quotas and usage of the tenants the user belongs to."""

    permission_action = AUTHENTICATED

    def get(self, request):
        tenants = Tenant.objects.visible_to(request.user).select_related("quota")
        rows = [{"tenant": t, "quota": getattr(t, "quota", None), "usage": services.tenant_usage(t)} for t in tenants]
        return render(request, "cluster/overview.html", {"nodes": machine_nodes(), "rows": rows})


class QuotaEditView(GantryView):
    model = Tenant
    permission_action = "quota.change"

    def get(self, request, pk):
        tenant = self.get_object()
        form = TenantQuotaForm(instance=TenantQuota.objects.filter(tenant=tenant).first())
        return render(request, "core/form.html", {"form": form, "object": tenant, "title": f"Quota of {tenant.name}", "submit_label": "Save quota"})

    def post(self, request, pk):
        tenant = self.get_object()
        form = TenantQuotaForm(data=request.POST, instance=TenantQuota.objects.filter(tenant=tenant).first())
        if form.is_valid():
            try:
                _, warnings = services.set_tenant_quota(actor=request.user, tenant=tenant, **form.cleaned_data)
            except ValidationError as exc:
                apply_service_errors(form, exc)
            else:
                messages.success(request, f"Saved the quota of {tenant.name}.")
                for warning in warnings:
                    messages.warning(request, warning)
                return redirect("cluster:overview")
        return render(request, "core/form.html", {"form": form, "object": tenant, "title": f"Quota of {tenant.name}", "submit_label": "Save quota"}, status=400)
