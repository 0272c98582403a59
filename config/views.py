"""The home page: what is yours across the apps (jobs, notebooks, GPUs, next steps).

It lives in config because it reads every app (jobs, datasets, scheduling, projects),
and only config may import them all (tests/test_architecture.py).
"""

from django.db.models import OuterRef, Q, Subquery
from django.shortcuts import render

from accounts.models import Tenant
from core.views import GantryView
from datasets.models import Dataset
from jobs import states
from jobs.models import Job, JobKind, MetricPoint
from jobs.services.holdings import holdings_by_tenant
from projects.models import Project
from projects.permissions import AUTHENTICATED, can

# Bounded panels: the page costs the same after a day's work as after a year's.
ACTIVE_SHOWN = 10
RESULTS_SHOWN = 5


class HomeView(GantryView):
    """The dashboard. Needs no object permission: everything on it is `visible_to`.

    An HTMX request (`?part=live`, every few seconds) gets only the live panel: the
    same view, a smaller template.
    """

    permission_action = AUTHENTICATED
    template_name = "core/home.html"
    partial_template_name = "core/_home_live.html"

    def get(self, request):
        tenants = list(Tenant.objects.visible_to(request.user).select_related("quota"))
        if request.tenant:
            tenants = [t for t in tenants if t.pk == request.tenant.pk]
        context = live_context(request.user, tenants)
        if request.htmx and request.GET.get("part") == "live":
            return render(request, self.partial_template_name, context)
        projects = Project.objects.visible_to(request.user).select_related("tenant")
        if request.tenant:
            projects = projects.filter(tenant=request.tenant)
        context.update(
            tenants=tenants,
            projects=projects[:12],
            checklist=checklist(request.user, tenants[0]) if len(tenants) == 1 else None,
        )
        return render(request, self.template_name, context)


def my_jobs(user, tenants):
    """The user's own jobs, in the tenants shown, and only in projects they may view."""
    return (
        Job.objects.visible_to(user)
        .filter(created_by=user, project__tenant__in=tenants)
        .select_related("project", "scheduling")
    )


def live_context(user, tenants) -> dict:
    """What the live panel shows: running and queued jobs, notebooks, results, GPUs."""
    mine = my_jobs(user, tenants)
    active = list(mine.exclude(state__in=states.TERMINAL).order_by("-created_at")[:ACTIVE_SHOWN])
    last_point = MetricPoint.objects.filter(job=OuterRef("pk")).order_by("-seq", "-pk")
    results = list(
        mine.filter(state__in=states.TERMINAL)
        .annotate(
            key_metric=Subquery(last_point.values("name")[:1]),
            key_value=Subquery(last_point.values("value")[:1]),
        )
        .order_by("-finished_at", "-pk")[:RESULTS_SHOWN]
    )
    usage = holdings_by_tenant([t.pk for t in tenants])
    gpus = []
    for tenant in tenants:
        quota = getattr(tenant, "quota", None)
        gpus.append(
            {
                "tenant": tenant,
                "in_use": usage[tenant.pk]["gpus"],  # jobs' and model endpoints' together
                "by_endpoints": usage[tenant.pk]["services"]["gpus"],
                "queued": usage[tenant.pk]["queued"],
                "quota": quota,
                "guaranteed": quota.guaranteed_gpus if quota else None,
                "limit": quota.max_gpus if quota else None,
            }
        )
    return {
        "active_jobs": [job for job in active if job.kind != JobKind.NOTEBOOK],
        "notebooks": [job for job in active if job.kind == JobKind.NOTEBOOK],
        "results": results,
        "gpu_rows": gpus,
        "has_active": bool(active),
    }


def checklist(user, tenant) -> dict | None:
    """A new tenant's first steps, each ticked by what exists (not by a flag), until all are.

    Create a project -> upload data (a dataset with a version) -> run the example (a job).
    """
    projects = Project.objects.visible_to(user).filter(tenant=tenant)
    first_project = projects.order_by("created_at", "pk").first()
    in_tenant = Q(project__tenant=tenant)
    dataset = (
        Dataset.objects.visible_to(user)
        .filter(in_tenant, versions__isnull=False)
        .order_by("created_at")
        .first()
    )
    any_dataset = dataset or Dataset.objects.visible_to(user).filter(in_tenant).first()
    has_job = Job.objects.visible_to(user).filter(in_tenant).exists()
    steps = [
        {
            "key": "project",
            "label": "Create a project",
            "done": first_project is not None,
            "action": "project" if can(user, "project.create", tenant) else None,
        },
        {
            "key": "data",
            "label": "Upload data",
            "done": dataset is not None,
            "action": "data" if first_project and can(user, "dataset.create", first_project) else None,
        },
        {
            "key": "job",
            "label": "Run the example",
            "done": has_job,
            "action": "job" if first_project and can(user, "job.submit", first_project) else None,
        },
    ]
    if all(step["done"] for step in steps):
        return None
    for step in steps:
        if not step["done"]:
            step["next"] = True
            break
    return {
        "tenant": tenant,
        "steps": steps,
        "project": first_project,
        "dataset": any_dataset,
    }
