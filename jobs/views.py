from functools import partial

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.db.models import Count, Value
from django.http import FileResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.timesince import timeuntil
from django.utils.timezone import localtime

from core.links import object_url
from core.paging import DeferredJoinPaginator
from core.views import GantryView, ObjectDetailView, ObjectListView, ServiceFormView
from jobs.filters import JobFilterSet
from jobs.forms import FORMS, TrainJobForm, initial_from_job
from jobs.models import Artifact, Job, JobKind, MetricPoint
from jobs.queries import iter_interleaved, iter_lines
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import clone_job, retry_job, submit_job
from jobs.states import BADGES, JobState
from projects.models import Project
from projects.permissions import get_object_for_user

LOG_TAIL_LINES = 1000
COMPARE_MAX_JOBS = 12
COMPARE_MAX_POINTS = 5000  # per job; longer series are thinned evenly


# What a row of the job table shows (jobs/_job_table.html), read as plain values.
JOB_ROW_COLUMNS = [
    "id", "name", "kind", "state", "state_reason", "scheduling__queue_position",
    "scheduling__estimated_start_at", "workers", "gpus", "cpus", "memory_mb", "created_at", "project_id", "project__slug",
    "project__tenant__slug", "created_by__username", "created_by__first_name",
    "created_by__last_name",
]
STATE_LABELS = dict(JobState.choices)


def job_row(row: dict) -> dict:
    """A row of `values(*JOB_ROW_COLUMNS)` as the table reads it. Plain values: the
    template engine resolves a dictionary key at once, where a model attribute costs it
    a failed item lookup first, and a page of model instances (each job with its
    project, tenant and user) cost more to build than to show."""
    state = row["state"]
    position, eta = row["scheduling__queue_position"], row["scheduling__estimated_start_at"]
    queued = state == JobState.QUEUED and position
    creator = row["created_by__username"]
    if creator:  # as User.__str__: the full name, else the username
        creator = f"{row['created_by__first_name']} {row['created_by__last_name']}".strip() or creator
    return {
        "pk": row["id"],
        "url": object_url("jobs:job_detail", row["id"]),
        "name": row["name"],
        "kind": row["kind"],
        "state_badge": BADGES.get(state, "text-bg-secondary"),
        "state_label": STATE_LABELS.get(state, state),
        "state_reason": row["state_reason"],
        "queue_position": position if queued else None,
        "starts_in": timeuntil(eta) if queued and eta else "",
        "project": f"{row['project__tenant__slug']}/{row['project__slug']}",
        "project_url": object_url("projects:project_detail", row["project_id"]),
        "resources": (f"{row['workers']} × " if row["workers"] > 1 else "")
        + f"{row['gpus']} GPU · {row['cpus']} CPU · {row['memory_mb']} MiB",
        "created_by": creator or "—",
        "created_at": localtime(row["created_at"]).strftime("%Y-%m-%d %H:%M"),
    }


def job_rows(page):
    """The page's jobs as table rows, joined for these rows only (core.paging)."""
    return [job_row(row) for row in page.values(*JOB_ROW_COLUMNS)]


class JobListView(ObjectListView):
    model = Job
    permission_action = "job.view"
    filterset_class = JobFilterSet
    template_name = "jobs/job_list.html"
    partial_template_name = "jobs/_job_table.html"
    paginator_class = partial(DeferredJoinPaginator, rows=job_rows)

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.request.tenant and "project" not in self.request.GET:
            queryset = queryset.filter(project__tenant=self.request.tenant)
        return queryset

    def get_extra_context(self):
        project = self.request.GET.get("project", "")
        compare = reverse("jobs:metric_compare", args=[project]) if project.isdigit() else None
        return {"kinds": JobKind.choices, "compare_url": compare}


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

    def get_form_kwargs(self, project):
        return {"user": self.request.user, "project": project}

    def get_context(self, form, target):
        return {
            **super().get_context(form, target),
            "project": target,
            "kind": self.kind,
            "kinds": JobKind.choices,
        }

    def perform(self, form, project):
        return submit_job(self.request.user, project, **form.spec())


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
        kwargs = {"user": self.request.user, "project": job.project}
        if self.request.method != "POST":
            kwargs["initial"] = initial_from_job(job)
        return kwargs

    def get_context(self, form, job):
        return {
            **super().get_context(form, job),
            "title": f"Clone {job}",
            "project": job.project,
            "kind": job.kind,
            "cloning": job,
        }

    def perform(self, form, job):
        return clone_job(self.request.user, job, **form.spec())


class JobDetailView(ObjectDetailView):
    model = Job
    permission_action = "job.view"
    template_name = "jobs/job_detail.html"

    def get_object(self):
        # What the page shows of the job's neighbours, in the same query.
        related = Job.objects.select_related(
            "project__tenant", "created_by", "image_record__image", "scheduling"
        )
        return get_object_for_user(
            self.request.user, related, self.permission_action, pk=self.kwargs["pk"]
        )

    def get_extra_context(self, job):
        try:
            worker = int(self.request.GET.get("worker", 0))
        except ValueError:
            worker = 0
        # The log and the metric charts come over the websocket (jobs/consumers.py,
        # jobs/static/jobs/live.js); the page renders the rest.
        return {
            "workers": list(job.worker_set.all()),
            "worker": worker,
            "events": list(job.events.select_related("actor")),
            "artifacts": list(job.artifacts.all()),
            "log_tail": LOG_TAIL_LINES,
            "image_record": getattr(job, "image_record", None),
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
        job = cancel_job(self.request.user, job)
        messages.success(self.request, f"{job}: {job.state_reason}.")
        return job


class JobRetryView(JobActionView):
    permission_action = "job.submit"

    def act(self, job):
        new = retry_job(self.request.user, job)
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


def _text_blocks(lines, prefix: bool, size: int = 64 * 1024):
    """Join log lines into ~64 KiB blocks of text for a streamed download."""
    parts, length = [], 0
    for line in lines:
        text = (f"[worker {line['worker']}] " if prefix else "") + line["text"] + "\n"
        parts.append(text)
        length += len(text)
        if length >= size:
            yield "".join(parts)
            parts, length = [], 0
    if parts:
        yield "".join(parts)


async def _async_blocks(blocks):
    # Under ASGI Django would list() a synchronous iterator before sending it (the
    # whole log in memory); stepping it in the thread that owns the DB connection
    # streams it instead.
    done = object()
    step = sync_to_async(lambda: next(blocks, done), thread_sensitive=True)
    while (block := await step()) is not done:
        yield block


class JobLogDownloadView(GantryView):
    """The whole log as text, streamed a few chunks at a time; `?worker=<rank>|all`."""

    model = Job
    permission_action = "job.view"

    def get(self, request, *args, **kwargs):
        job = self.get_object()
        raw = request.GET.get("worker", "all")
        if raw == "all":
            workers = list(range(job.workers))
        elif raw.isdigit() and int(raw) < job.workers:
            workers = [int(raw)]
        else:
            return HttpResponseBadRequest(f"worker must be all or a rank below {job.workers}.")
        lines = (
            iter_lines(job, worker=workers[0])
            if len(workers) == 1
            else iter_interleaved(job, workers)
        )
        blocks = _text_blocks(lines, prefix=len(workers) > 1)
        response = StreamingHttpResponse(
            _async_blocks(blocks) if isinstance(request, ASGIRequest) else blocks,
            content_type="text/plain; charset=utf-8",
        )
        suffix = f"-worker-{workers[0]}" if raw != "all" else ""
        response["Content-Disposition"] = f'attachment; filename="job-{job.pk}{suffix}.log"'
        return response


class MetricCompareView(GantryView):
    """One metric across several jobs of a project, on one chart (`?name=loss&job=3&job=7`).

    Without `name` the chart opens on a metric the ticked jobs logged (else the newest
    job's), never on one with nothing to draw; the ticked jobs stay ticked whatever the
    metric, so switching it keeps the comparison."""

    model = Project
    permission_action = "job.view"

    def get(self, request, *args, **kwargs):
        project = self.get_object()
        try:
            picked = [int(v) for v in request.GET.getlist("job") if v != ""]
        except ValueError:
            return HttpResponseBadRequest("job must be job ids.")
        if len(picked) > COMPARE_MAX_JOBS:
            return HttpResponseBadRequest(f"Compare at most {COMPARE_MAX_JOBS} jobs.")
        jobs = Job.objects.visible_to(request.user).filter(project=project)
        points = MetricPoint.objects.filter(job__in=jobs, worker=0)
        names = list(points.values_list("name", flat=True).distinct().order_by("name")[:200])
        name = request.GET.get("name") or self.default_name(points, picked)
        reporting = (
            jobs.filter(metrics__name=name, metrics__worker=0)
            .annotate(points=Count("metrics"))
            .order_by("-pk")[:50]
            if name
            else []
        )
        candidates = list(reporting)
        known = {j.pk for j in candidates}
        missing = [pk for pk in picked if pk not in known]
        if missing:  # ticked, but without this metric: still listed, still ticked
            candidates += list(jobs.filter(pk__in=missing).annotate(points=Value(0)).order_by("-pk"))
        selected = [j for j in candidates if j.pk in picked] or [j for j in candidates if j.points][:3]
        series = [
            {
                "job": job.pk,
                "label": f"#{job.pk} {job.name}"[:60],
                "points": self.series_points(job, name) if job.points else [],
            }
            for job in selected
        ]
        return render(
            request,
            "jobs/metric_compare.html",
            {
                "object": project,
                "project": project,
                "names": names,
                "name": name,
                "candidates": candidates,
                "selected": {j.pk for j in selected},
                "series": series,
            },
        )

    @staticmethod
    def default_name(points, picked) -> str:
        """A metric with points to draw: the ticked jobs' first, else the newest job's."""
        if picked:
            mine = points.filter(job__in=picked).values_list("name", flat=True)
            first = mine.order_by("name").first()
            if first:
                return first
        newest = points.order_by("-job_id", "name").values_list("name", flat=True).first()
        return newest or ""

    @staticmethod
    def series_points(job, name) -> list[list]:
        """[step, value] pairs of rank 0, thinned to COMPARE_MAX_POINTS; a point logged
        without a step is placed by its order (1, 2, …), as the job page draws it."""
        points = MetricPoint.objects.filter(job=job, name=name, worker=0)
        total = points.count()
        stride = max(1, -(-total // COMPARE_MAX_POINTS))
        rows = points.order_by("seq", "pk").values_list("step", "value")
        pairs = [
            [index + 1 if step is None else step, value]
            for index, (step, value) in enumerate(rows.iterator())
            if index % stride == 0
        ]
        return sorted(pairs, key=lambda pair: pair[0])
