from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import FileResponse
from django.shortcuts import redirect, render

from core.views import GantryView, ObjectDetailView, ObjectListView, ServiceFormView
from jobs import services
from jobs.filters import JobFilterSet
from jobs.forms import FORMS, TrainJobForm, initial_from_job
from jobs.models import Artifact, Job, JobKind, MetricPoint
from jobs.queries import tail_lines
from projects.models import Project

LOG_TAIL_LINES = 500


class JobListView(ObjectListView):
    model = Job
    permission_action = "job.view"
    filterset_class = JobFilterSet
    template_name = "jobs/job_list.html"
    partial_template_name = "jobs/_job_table.html"

    def get_queryset(self):
        queryset = super().get_queryset().select_related("project__tenant", "created_by")
        if self.request.tenant and "project" not in self.request.GET:
            queryset = queryset.filter(project__tenant=self.request.tenant)
        return queryset

    def get_extra_context(self):
        return {"kinds": JobKind.choices}


class JobSubmitView(ServiceFormView):
    """Submit a job to the project `pk`; `?kind=` picks the form."""

    model = Project
    permission_action = "job.submit"
    template_name = "jobs/job_form.html"
    submit_label = "Submit job"
    success_message = "Submitted {object}."

    @property
    def kind(self):
        kind = self.request.POST.get("kind") or self.request.GET.get("kind")
        return kind if kind in FORMS else JobKind.TRAIN

    @property
    def form_class(self):
        return FORMS.get(self.kind, TrainJobForm)

    @property
    def title(self):
        return f"New {JobKind(self.kind).label.lower()} job"

    def get_context(self, form, target):
        return {
            **super().get_context(form, target),
            "project": target,
            "kind": self.kind,
            "kinds": JobKind.choices,
        }

    def perform(self, form, project):
        return services.submit_job(self.request.user, project, **form.spec())


class JobCloneView(ServiceFormView):
    """Clone and edit: the submit form, filled in from an existing job."""

    model = Job
    permission_action = "job.submit"
    template_name = "jobs/job_form.html"
    submit_label = "Submit copy"
    success_message = "Submitted {object}."

    @property
    def form_class(self):
        return FORMS[self.get_target().kind]

    def get_target(self):
        if not hasattr(self, "_job"):
            self._job = self.get_object()
        return self._job

    def get_form_kwargs(self, job):
        return {} if self.request.method == "POST" else {"initial": initial_from_job(job)}

    def get_context(self, form, job):
        return {
            **super().get_context(form, job),
            "title": f"Clone {job}",
            "project": job.project,
            "kind": job.kind,
            "cloning": job,
        }

    def perform(self, form, job):
        return services.clone_job(self.request.user, job, **form.spec())


class JobDetailView(ObjectDetailView):
    model = Job
    permission_action = "job.view"
    template_name = "jobs/job_detail.html"

    def get_extra_context(self, job):
        try:
            worker = int(self.request.GET.get("worker", 0))
        except ValueError:
            worker = 0
        metrics = MetricPoint.objects.filter(job=job)
        return {
            "workers": job.worker_set.all(),
            "worker": worker,
            "events": job.events.select_related("actor"),
            "artifacts": job.artifacts.all(),
            "log_lines": tail_lines(job, worker=worker, count=LOG_TAIL_LINES),
            "log_limit": LOG_TAIL_LINES,
            "metric_names": metrics.values("name").annotate(points=Count("pk")).order_by("name"),
            "metric_points": metrics.order_by("-ts", "-pk")[:50],
        }

    def get(self, request, *args, **kwargs):
        if request.htmx:
            job = self.get_object()
            return render(
                request, "jobs/_job_live.html", {"object": job, **self.get_extra_context(job)}
            )
        return super().get(request, *args, **kwargs)


class JobActionView(GantryView):
    """A POST-only button on the job page that calls one service."""

    model = Job
    http_method_names = ["post"]

    def act(self, job):
        raise NotImplementedError

    def post(self, request, *args, **kwargs):
        job = self.get_object()
        try:
            result = self.act(job)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect(job.get_absolute_url())
        return redirect(result.get_absolute_url())


class JobCancelView(JobActionView):
    permission_action = "job.cancel"

    def act(self, job):
        job = services.cancel_job(self.request.user, job)
        messages.success(self.request, f"{job}: {job.state_reason}.")
        return job


class JobRetryView(JobActionView):
    permission_action = "job.submit"

    def act(self, job):
        new = services.retry_job(self.request.user, job)
        messages.success(self.request, f"Submitted {new}, a retry of {job}.")
        return new


class ArtifactDownloadView(GantryView):
    model = Artifact
    permission_action = "job.view"

    def get(self, request, *args, **kwargs):
        artifact = self.get_object()
        return FileResponse(
            artifact.file.open("rb"),
            as_attachment=True,
            filename=artifact.path.rsplit("/", 1)[-1],
        )
