"""The jobs API: thin serializers and viewsets over jobs.services."""

from django.db import transaction
from django.http import FileResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api import (
    FILE_DOWNLOAD,
    WHOLE_NUMBER,
    RestrictedViewSetMixin,
    VisibleRelatedField,
    id_filter,
    int_param,
)
from core.links import object_url
from core.paging import DeferredJoinPagination
from datasets.models import DatasetVersion
from images.services import images_for_job
from jobs.filters import JobFilterSet
from jobs.models import Artifact, Job, JobEvent, JobKind, JobWorker, MetricPoint
from jobs.queries import count_lines_after, lines_before, log_lines
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import retry_job, submit_job
from projects.models import Project
from projects.permissions import get_object_for_user, restrict, token_of


class JobWorkerSerializer(serializers.ModelSerializer):
    # Deliberately no notebook_token, pid details beyond what a user may see.
    class Meta:
        model = JobWorker
        fields = ["rank", "state", "exit_code", "reason", "last_heartbeat_at", "host", "port"]


class JobEventSerializer(serializers.ModelSerializer):
    # Null for what Gantry did itself (admission, the runner) or a deleted user.
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = JobEvent
        fields = ["at", "from_state", "to_state", "reason", "actor"]


class JobSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="project.tenant_id", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    url = serializers.SerializerMethodField()
    # The image the job runs in (JobImage): its id, the reference as submitted
    # (with the tag) and the digest resolved at submit time; null when it names none.
    image = serializers.SerializerMethodField()
    image_reference = serializers.SerializerMethodField()
    image_digest = serializers.SerializerMethodField()
    image_note = serializers.SerializerMethodField()
    # The scheduler's view of a queued job (its JobScheduling row; null when it has none).
    queue_position = serializers.IntegerField(read_only=True, allow_null=True)
    estimated_start_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "tenant",
            "project",
            "name",
            "kind",
            "state",
            "state_reason",
            "created_by",
            "runtime",
            "command",
            "parameters",
            "env",
            "gpus",
            "cpus",
            "memory_mb",
            "workers",
            "inputs",
            "code_snapshot",
            "outputs_dir",
            "timeout_seconds",
            "max_retries",
            "attempt",
            "priority",
            "backend",
            "placement",
            "cloned_from",
            "created_at",
            "queued_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "cancel_requested_at",
            "queue_position",
            "estimated_start_at",
            "preemptions",
            "image",
            "image_reference",
            "image_digest",
            "image_note",
        ]
        read_only_fields = fields

    def get_url(self, job) -> str:
        return job.get_absolute_url()

    def get_image(self, job) -> int | None:
        record = getattr(job, "image_record", None)
        return record.image_id if record else None

    def get_image_reference(self, job) -> str | None:
        record = getattr(job, "image_record", None)
        return record.reference if record else None

    def get_image_digest(self, job) -> str | None:
        record = getattr(job, "image_record", None)
        return (record.digest or None) if record else None

    def get_image_note(self, job) -> str:
        """On the local backend: what the job really ran with when not the image's environment."""
        record = getattr(job, "image_record", None)
        return record.runtime_note if record else ""


def iso_datetime_in(tz):
    """DRF's DateTimeField output for aware datetimes, with the time zone looked up once."""

    def iso(value):
        text = value.astimezone(tz).isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    return iso


class JobListSerializer(JobSerializer):
    """A job in a list: what a list page or a poller needs, not the whole spec.

    Lists are the hot path (pollers, dashboards); the full spec, parameters,
    environment and placement come with the job itself (`GET /jobs/<id>/`).
    """

    class Meta(JobSerializer.Meta):
        fields = [
            "id",
            "url",
            "tenant",
            "project",
            "name",
            "kind",
            "state",
            "state_reason",
            "created_by",
            "gpus",
            "workers",
            "priority",
            "attempt",
            "created_at",
            "started_at",
            "finished_at",
            "queue_position",
            "estimated_start_at",
            "image",
            "image_reference",
            "image_digest",
        ]
        read_only_fields = fields

    def to_representation(self, row):
        """A row of `Job.objects.values(*JOB_LIST_COLUMNS)` as the declared fields write it.

        tests/jobs/test_api_list.py compares the two. Built directly, from plain rows:
        DRF's generic per-field path was a third of the list's time at 50 rows, and
        model instances (a job, its project, user and image record each) another
        eighth. Dates are written as DRF's DateTimeField writes them (ISO 8601 in the
        current time zone, "Z" for UTC), without its per-value lookups.
        """
        if not hasattr(self, "_date"):
            self._date = iso_datetime_in(timezone.get_current_timezone())
        date = self._date
        return {
            "id": row["id"],
            "url": object_url("jobs:job_detail", row["id"]),
            "tenant": row["project__tenant_id"],
            "project": row["project_id"],
            "name": row["name"],
            "kind": row["kind"],
            "state": row["state"],
            "state_reason": row["state_reason"],
            "created_by": row["created_by__username"],
            "gpus": row["gpus"],
            "workers": row["workers"],
            "priority": row["priority"],
            "attempt": row["attempt"],
            "created_at": date(row["created_at"]),
            "started_at": date(row["started_at"]) if row["started_at"] else None,
            "finished_at": date(row["finished_at"]) if row["finished_at"] else None,
            "queue_position": row["scheduling__queue_position"],
            "estimated_start_at": (
                date(eta) if (eta := row["scheduling__estimated_start_at"]) else None
            ),
            "image": row["image_record__image_id"],
            "image_reference": row["image_record__reference"],  # None without a record
            "image_digest": row["image_record__digest"] or None,
        }


# What JobListSerializer reads: the list loads these columns as plain rows.
JOB_LIST_COLUMNS = [
    "id",
    "project_id",
    "project__tenant_id",
    "name",
    "kind",
    "state",
    "state_reason",
    "created_by__username",
    "gpus",
    "workers",
    "priority",
    "attempt",
    "created_at",
    "started_at",
    "finished_at",
    "scheduling__queue_position",
    "scheduling__estimated_start_at",
    "image_record__image_id",
    "image_record__reference",
    "image_record__digest",
]


class JobDetailSerializer(JobSerializer):
    workers = JobWorkerSerializer(source="worker_set", many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "workers", "events"]
        read_only_fields = fields


class JobSubmitSerializer(serializers.Serializer):
    """What a submit takes; jobs.services.validate_spec does the real checking."""

    project = VisibleRelatedField(queryset=Project.objects.all())
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    kind = serializers.ChoiceField(choices=JobKind.choices, default=JobKind.TRAIN)
    runtime = serializers.CharField(required=False, allow_blank=True, max_length=500)
    command = serializers.CharField(required=False, allow_blank=True)
    parameters = serializers.JSONField(required=False)
    env = serializers.JSONField(required=False)
    gpus = serializers.IntegerField(required=False, min_value=0)
    cpus = serializers.IntegerField(required=False, min_value=1)
    memory_mb = serializers.IntegerField(required=False, min_value=16)
    workers = serializers.IntegerField(required=False, min_value=1)
    inputs = serializers.JSONField(required=False)
    code_snapshot = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="A ready code snapshot of the job's project (POST /api/v1/snapshots/): "
        "its files are staged into the job's working directory.",
    )
    outputs_dir = serializers.CharField(required=False, allow_blank=True, max_length=200)
    timeout_seconds = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    max_retries = serializers.IntegerField(required=False, min_value=0)
    priority = serializers.IntegerField(required=False)
    image = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="A runtime image id: public, or of the project's tenant.",
    )


class LogLineSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    worker = serializers.IntegerField()
    stream = serializers.CharField()
    ts = serializers.FloatField(allow_null=True)
    text = serializers.CharField(allow_blank=True)


class LogPageSerializer(serializers.Serializer):
    """One page of a worker's log: paged by sequence number, not by page number."""

    worker = serializers.IntegerField()
    count = serializers.IntegerField(help_text="How many lines the worker has logged in all.")
    results = LogLineSerializer(many=True)
    next_after = serializers.IntegerField(
        required=False, help_text="Forwards: pass back as `after` for the next lines."
    )
    next_before = serializers.IntegerField(
        required=False, help_text="Backwards: pass back as `before` for earlier lines."
    )
    complete = serializers.BooleanField(
        help_text="Forwards: no more lines for now; backwards: the first line is here."
    )


class MetricPointSerializer(serializers.ModelSerializer):
    class Meta:
        model = MetricPoint
        fields = ["worker", "seq", "name", "step", "value", "ts"]


class ArtifactSerializer(serializers.ModelSerializer):
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = ["id", "job", "worker", "path", "size", "sha256", "created_at", "download_url"]

    def get_download_url(self, artifact) -> str:
        return reverse("artifact-download", args=[artifact.pk])


def check_mounts_within_token(request, job) -> None:
    """Call inside the submit's transaction: a job submitted with a token limited to a
    project mounts no dataset of another project, though its user may read them."""
    mounted = {i["dataset_version"] for i in job.inputs if "dataset_version" in i}
    token = token_of(request)
    if not mounted or token is None or token.project_id is None:
        return
    reachable = restrict(
        DatasetVersion.objects.filter(pk__in=mounted),
        request.user,
        "dataset.view",
        token,
        field="dataset__project",
    )
    if reachable.count() != len(mounted):
        raise serializers.ValidationError(
            {"inputs": "This token is limited to one project: its jobs mount only that "
             "project's datasets."}
        )


class JobViewSet(RestrictedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Job.objects.none()
    filterset_class = JobFilterSet
    pagination_class = DeferredJoinPagination
    permission_actions = {
        "list": "job.view",
        "retrieve": "job.view",
        "create": "job.submit",
        "cancel": "job.cancel",
        "retry": "job.submit",
        "logs": "job.view",
        "metrics": "job.view",
        "artifacts": "job.view",
    }

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action == "list":
            return queryset  # filtered and counted on the jobs table; page_rows reads the page
        queryset = queryset.select_related(
            "project", "created_by", "image_record__image", "scheduling"
        )
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("worker_set", "events__actor")
        return queryset

    def page_rows(self, page):
        """A list page's jobs as plain rows (JobListSerializer), joined for these rows only.
        Other actions' pages (a job's metrics) are theirs as they come."""
        return page.values(*JOB_LIST_COLUMNS) if self.action == "list" else page

    def get_serializer_class(self):
        if self.action == "create":
            return JobSubmitSerializer
        if self.action == "retrieve":
            return JobDetailSerializer
        if self.action == "list":
            return JobListSerializer
        return JobSerializer

    @extend_schema(request=JobSubmitSerializer, responses={201: JobSerializer})
    def create(self, request, *args, **kwargs):
        serializer = JobSubmitSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        project = get_object_for_user(
            request.user, Project, "job.submit", token=token_of(request), pk=data.pop("project").pk
        )
        image_id = data.pop("image", None)
        if image_id is not None:
            # Another tenant's private image reads exactly like one that does not exist.
            data["image"] = images_for_job(request.user, project).filter(pk=image_id).first()
            if data["image"] is None:
                raise serializers.ValidationError({"image": ["No such image."]})
        with transaction.atomic():
            job = submit_job(request.user, project, **data)
            check_mounts_within_token(request, job)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = cancel_job(request.user, self.get_object())
        return Response(JobSerializer(job).data)

    @extend_schema(request=None, responses={201: JobSerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        with transaction.atomic():
            job = retry_job(request.user, self.get_object())
            check_mounts_within_token(request, job)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("worker", WHOLE_NUMBER, description="worker rank (default 0)"),
            OpenApiParameter("after", WHOLE_NUMBER, description="lines after this seq"),
            OpenApiParameter(
                "before",
                WHOLE_NUMBER,
                description="instead of after: the last `limit` lines before this seq",
            ),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1},
                description="at most this many (more than 5000 counts as 5000)",
            ),
        ],
        responses=LogPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """Log lines in seq order, one page at a time: pass `next_after` back as `after`,
        or page backwards (the job page's "load earlier lines") with `before`."""
        job = self.get_object()
        worker = int_param(request, "worker", 0)
        after = int_param(request, "after", 0)
        before = int_param(request, "before")
        limit = min(int_param(request, "limit", 1000, minimum=1), 5000)
        count = count_lines_after(job, worker=worker, after=0)
        if before is not None:
            lines = lines_before(job, worker=worker, before=before, limit=limit)
            return Response(
                {
                    "worker": worker,
                    "count": count,
                    "results": lines,
                    "next_before": lines[0]["seq"] if lines else before,
                    "complete": not lines or lines[0]["seq"] <= 1,
                }
            )
        lines = log_lines(job, worker=worker, after=after, limit=limit)
        return Response(
            {
                "worker": worker,
                "count": count,
                "results": lines,
                "next_after": lines[-1]["seq"] if lines else after,
                "complete": len(lines) < limit,
            }
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("name", OpenApiTypes.STR),
            OpenApiParameter("worker", WHOLE_NUMBER),
        ],
        responses=MetricPointSerializer(many=True),
    )
    @action(detail=True, methods=["get"])
    def metrics(self, request, pk=None):
        job = self.get_object()
        points = MetricPoint.objects.filter(job=job).order_by("name", "step", "seq")
        if request.query_params.get("name"):
            points = points.filter(name=request.query_params["name"])
        worker = int_param(request, "worker")
        if worker is not None:
            points = points.filter(worker=worker)
        page = self.paginate_queryset(points)
        return self.get_paginated_response(MetricPointSerializer(page, many=True).data)

    @extend_schema(responses=ArtifactSerializer(many=True))
    @action(detail=True, methods=["get"])
    def artifacts(self, request, pk=None):
        """The job's output files, a page at a time like every list."""
        job = self.get_object()
        page = self.paginate_queryset(job.artifacts.order_by("worker", "path"))
        return self.get_paginated_response(ArtifactSerializer(page, many=True).data)


@id_filter("job", "this job's artifacts")
class ArtifactViewSet(RestrictedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Artifact.objects.none()
    serializer_class = ArtifactSerializer
    scope_field = "job__project"
    permission_actions = {"list": "job.view", "retrieve": "job.view", "download": "job.view"}

    def get_queryset(self):
        queryset = super().get_queryset().select_related("job__project")
        job = int_param(self.request, "job")
        if job is not None:
            queryset = queryset.filter(job_id=job)
        return queryset

    @extend_schema(responses=FILE_DOWNLOAD)
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        artifact = self.get_object()
        return FileResponse(
            artifact.file.open("rb"), as_attachment=True, filename=artifact.path.rsplit("/", 1)[-1]
        )
