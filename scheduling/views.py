from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import F
from django.shortcuts import redirect, render

from accounts.models import Tenant
from core import registry
from core.views import GantryView, apply_service_errors
from jobs.models import Job
from jobs.states import JobState
from projects.permissions import AUTHENTICATED
from scheduling import services
from scheduling.forms import TenantQuotaForm
from scheduling.machines import machine_rows
from scheduling.models import TenantQuota


def backend_nodes() -> list[dict]:
    """Nodes with their capacity, as the configured job backend reports them."""
    from jobs.compute import get_backend

    backend = get_backend()
    return [
        {
            "name": node.name,
            "backend": backend.name,
            "cpus": node.cpus,
            "memory_mb": node.memory_mb,
            "gpus": node.gpus,
            "gpu_model": node.gpu_model,
        }
        for node in backend.nodes()
    ]


def usage_bar(used: int, guaranteed: int, limit: int) -> dict:
    """Segments (percent of the bar) for GPUs in use against guarantee and borrow limit."""
    scale = max(limit, used, 1)

    def pct(n):
        return round(100 * n / scale, 1)

    own = min(used, guaranteed)
    borrowed = max(used - guaranteed, 0)
    idle_guarantee = max(guaranteed - used, 0)
    may_borrow = max(limit - max(used, guaranteed), 0)
    return {
        "segments": [
            (pct(own), "bg-primary", f"{own} in use within the guarantee"),
            (pct(borrowed), "bg-warning", f"{borrowed} in use, borrowed"),
            (pct(idle_guarantee), "bg-primary-subtle", f"{idle_guarantee} guaranteed, idle"),
            (pct(may_borrow), "bg-body-secondary", f"{may_borrow} more may be borrowed"),
        ],
        "over": used > limit,
    }


class ClusterOverviewView(GantryView):
    """Nodes and GPUs, and the quotas and usage of the tenants the user belongs to."""

    permission_action = AUTHENTICATED

    def get(self, request):
        from jobs.compute.sandbox import isolation_notice
        from jobs.services.holdings import holdings_by_tenant

        nodes = backend_nodes()
        machines, machine_problems = machine_rows(request.user)
        cluster_gpus = sum(n["gpus"] for n in nodes)
        tenants = list(Tenant.objects.visible_to(request.user).select_related("quota"))
        usage = holdings_by_tenant([t.pk for t in tenants])
        rows = []
        for t in tenants:
            quota = getattr(t, "quota", None)
            guaranteed = quota.guaranteed_gpus if quota else 0
            limit = quota.max_gpus if quota else cluster_gpus
            rows.append(
                {
                    "tenant": t,
                    "quota": quota,
                    "usage": usage[t.pk],
                    "jobs_gpus": usage[t.pk]["gpus"] - usage[t.pk]["services"]["gpus"],
                    "limit": limit,
                    "bar": usage_bar(usage[t.pk]["gpus"], guaranteed, limit),
                }
            )
        return render(
            request,
            "scheduling/overview.html",
            {
                "nodes": nodes,
                "rows": rows,
                "cluster_gpus": cluster_gpus,
                "machines": machines,
                "machine_problems": machine_problems,
                "isolation_notice": isolation_notice(),
                "serving": registry.serving_replicas(request.user),
            },
        )


def queued_jobs(user):
    """Queued jobs the user can see, in queue order (jobs not yet placed last)."""
    return (
        Job.objects.visible_to(user)
        .filter(state=JobState.QUEUED)
        .select_related("project__tenant", "created_by", "scheduling")
        .order_by(
            F("scheduling__queue_position").asc(nulls_last=True), "-priority", "created_at", "pk"
        )
    )


class QueueView(GantryView):
    """A queue page; HTMX refreshes the table from the same view."""

    paginate_by = 100

    def render_queue(self, request, jobs, context):
        page = Paginator(jobs, self.paginate_by).get_page(request.GET.get("page"))
        context = {**context, "page": page, "objects": page.object_list}
        template = "scheduling/_queue_table.html" if request.htmx else "scheduling/queue.html"
        return render(request, template, context)


class TenantQueueView(QueueView):
    """One tenant's queued jobs: position, estimated start and why each waits."""

    model = Tenant
    permission_action = "quota.view"

    def get(self, request, pk):
        tenant = self.get_object()
        jobs = queued_jobs(request.user).filter(project__tenant=tenant)
        return self.render_queue(request, jobs, {"tenant": tenant})


class ClusterQueueView(QueueView):
    """The whole queue as far as the user may see it.

    Lab administrators (superusers) see every tenant's jobs; anyone else sees the jobs
    of their own projects, with their real positions in the one cluster-wide queue
    (gaps are other tenants' jobs). Not a matrix action: there is no tenant or project
    to check against, and `Job.objects.visible_to` already says what each user may see.
    """

    permission_action = AUTHENTICATED

    def get(self, request):
        return self.render_queue(request, queued_jobs(request.user), {"tenant": None})


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
                return redirect("scheduling:overview")
        return render(request, "core/form.html", {"form": form, "object": tenant, "title": f"Quota of {tenant.name}", "submit_label": "Save quota"}, status=400)
