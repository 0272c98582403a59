from django import forms
from django.urls import reverse

from core.views import ObjectDetailView, ObjectListView, ServiceFormView
from projects.models import Project
from projects.permissions import can, restrict
from sweeps import services
from sweeps.controller import best_trial, device_hours
from sweeps.filters import SweepFilterSet
from sweeps.forms import SweepForm
from sweeps.models import Sweep, TrialState


class SweepListView(ObjectListView):
    model = Sweep
    permission_action = "sweep.view"
    filterset_class = SweepFilterSet
    template_name = "sweeps/sweep_list.html"
    partial_template_name = "sweeps/_sweep_table.html"

    def get_queryset(self):
        return super().get_queryset().select_related("project__tenant").order_by("-created_at", "-pk")

    def get_extra_context(self):
        # Where the "New sweep" button may lead: the projects the user may start one in
        # (`restrict` is what they can see; the role decides whether they may create).
        user = self.request.user
        projects = restrict(Project.objects.all(), user, "sweep.create").select_related("tenant")
        return {
            "create_in": [
                p for p in projects.order_by("tenant__name", "name")[:50] if can(user, "sweep.create", p)
            ]
        }


class SweepCreateView(ServiceFormView):
    model = Project
    permission_action = "sweep.create"
    form_class = SweepForm
    template_name = "sweeps/sweep_form.html"
    title = "New sweep"
    submit_label = "Start sweep"
    success_message = "Started {object}."

    def get_form_kwargs(self, project):
        return {"user": self.request.user, "project": project}

    def perform(self, form, project):
        data = form.cleaned_data
        return services.create_sweep(
            self.request.user, project, data["source"], code_snapshot=data["code_snapshot"]
        )


class StopForm(forms.Form):
    pass


class SweepStopView(ServiceFormView):
    model = Sweep
    permission_action = "sweep.stop"
    form_class = StopForm
    title = "Stop this sweep?"
    submit_label = "Stop sweep (cancels its running trials)"
    success_message = "Stopped {object}."

    def perform(self, form, sweep):
        return services.stop_sweep(self.request.user, sweep)


def trial_rows(sweep, trials) -> list[dict]:
    return [
        {
            "number": t.number,
            "job": t.job_id,
            "state": t.state,
            "objective": t.objective,
            "params": t.params,
            "reason": t.reason,
            "job_state": t.job.state if t.job else "",
        }
        for t in trials
    ]


class SweepDetailView(ObjectDetailView):
    model = Sweep
    permission_action = "sweep.view"
    template_name = "sweeps/sweep_detail.html"

    def get_extra_context(self, sweep):
        from django.utils import timezone

        trials = list(sweep.trials.select_related("job").order_by("number"))
        best = best_trial(sweep)
        user = self.request.user
        counts = {state: sum(t.state == state for t in trials) for state in TrialState.values}
        in_flight = [t for t in trials if t.state == TrialState.RUNNING]
        names = list(sweep.space)
        links = {}
        if best is not None and best.job is not None:
            if can(user, "model.register", sweep.project):
                links["register"] = reverse("modelhub:register_from_job", args=[best.job_id])
            if can(user, "job.submit", sweep.project):
                links["clone"] = reverse("jobs:job_clone", args=[best.job_id])
        return {
            "trials": trials,
            "best": best,
            "counts": counts,
            "running": sum(1 for t in in_flight if t.job and t.job.state == "running"),
            "waiting": sum(1 for t in in_flight if t.job and t.job.state in ("queued", "admitted")),
            "param_names": names,
            "device_hours": device_hours(trials, timezone.now()),
            "importance": sorted(sweep.importance.items(), key=lambda kv: -kv[1]),
            "chart": {
                "direction": sweep.direction,
                "objective": sweep.objective,
                "params": names,
                "space": sweep.space,
                "trials": trial_rows(sweep, trials),
            },
            "links": links,
            "can_stop": not sweep.is_finished and can(user, "sweep.stop", sweep),
            "can_create": can(user, "sweep.create", sweep.project),
        }
