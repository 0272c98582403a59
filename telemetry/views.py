"""The usage report page (and its CSV), and a project's idle-GPU policy."""

from __future__ import annotations

import io
import json

from django.contrib import messages
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render

from core import registry
from core.views import GantryView
from jobs.models import Job
from projects.models import Project
from projects.permissions import AUTHENTICATED, restrict
from telemetry import services, usage
from telemetry.charts import job_series
from telemetry.forms import IdlePolicyForm, UsageReportForm
from telemetry.models import IdlePolicy


def report_for(request, token=None):
    """(form, rows, totals) of the report the query string asks for; rows None when the
    form is not valid (its errors say why)."""
    form = UsageReportForm(request.GET, user=request.user, token=token)
    if not form.is_valid():
        return form, None, None
    data = form.cleaned_data
    jobs = restrict(Job.objects.all(), request.user, "job.view", token).filter(
        project__tenant__in=data["tenants"]
    )
    start, end = usage.report_bounds(data["start"], data["end"])
    services = registry.service_usage(request.user, token, data["tenants"], start, end)
    rows = usage.build_report(
        jobs,
        data["start"],
        data["end"],
        group=data["group"],
        period=data["period"],
        services=[ran for provided in services for ran in provided],
    )
    return form, rows, usage.totals(rows)


class UsageReportView(GantryView):
    """GPU-hours allocated and used, and endpoints' replica-hours, for tenant owners and lab
    administrators."""

    permission_action = AUTHENTICATED

    def get(self, request):
        form, rows, totals = report_for(request)
        if rows is not None and request.GET.get("export") == "csv":
            out = io.StringIO()
            usage.write_csv(rows, out)
            response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
            data = form.cleaned_data
            name = f"gpu-usage-{data['start']}-{data['end']}-{data['group']}-{data['period']}"
            response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
            return response
        context = {
            "form": form,
            "rows": [r.as_dict() for r in rows] if rows is not None else None,
            "totals": totals,
            "chart": json.dumps(usage.chart_series(rows)) if rows else None,
            "query": request.GET.urlencode(),
        }
        return render(
            request,
            "telemetry/usage.html",
            context,
            status=200 if rows is not None or not request.GET else 400,
        )


class IdlePolicyView(GantryView):
    """A project's idle-GPU policy: maintainers change it."""

    permission_action = "project.change"
    model = Project

    def _render(self, request, project, form, status=200):
        return render(
            request, "telemetry/idle_policy.html", {"project": project, "form": form}, status=status
        )

    def get(self, request, pk):
        project = self.get_object()
        policy = IdlePolicy.objects.filter(project=project).first()
        return self._render(request, project, IdlePolicyForm(instance=policy))

    def post(self, request, pk):
        project = self.get_object()
        form = IdlePolicyForm(request.POST, instance=IdlePolicy(project=project))
        if not form.is_valid():
            return self._render(request, project, form, status=400)
        values = {f: form.cleaned_data[f] for f in IdlePolicyForm.Meta.fields}
        services.set_idle_policy(request.user, project, **values)
        messages.success(request, "Idle-GPU policy saved.")
        return redirect(project.get_absolute_url())


class JobGpuSeriesView(GantryView):
    """The job page's GPU charts, as JSON (polled while the job runs)."""

    permission_action = "job.view"
    model = Job

    def get(self, request, pk):
        return JsonResponse(job_series(self.get_object()))
