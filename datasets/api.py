"""The datasets API: datasets, versions, files and upload sessions, thin over datasets.services.

The upload protocol (the browser page and `gantry datasets push`, cli/gantry_cli/transfer.py,
speak it):
1. POST /uploads/ {dataset, files: [{path, size, sha256?}], parent?, remove?, exact?}
   -> the session with, per file, its id, part_count and the parts already held; or 409
   {code: "unchanged", version} when every file is its parent's (by sha256) and nothing
   is removed: no session, no new version.
2. Per part of part_size bytes (the last one shorter):
   - filesystem: PUT /uploads/{id}/part/?file=F&number=N, raw bytes, header
     X-Part-Sha256 (hex) — the server checks size and sha256 before keeping it;
   - s3: POST /uploads/{id}/sign/ {file, numbers} -> {urls: {N: url}}; PUT the bytes
     to the url (straight to the gateway); then POST /uploads/{id}/complete-part/
     {file, number, sha256, etag}.
3. GET /uploads/{id}/ tells which parts arrived: resume by sending the others.
4. POST /uploads/{id}/commit/ -> 202; poll GET /uploads/{id}/ until state is
   committed (version set) or open again with an error to act on.
"""

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, parsers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from core import registry
from core.api import (
    FILE_DOWNLOAD,
    WHOLE_NUMBER,
    RestrictedViewSetMixin,
    VisibleRelatedField,
    id_filter,
    int_param,
)
from core.parsers import JSONParser
from datasets import downloads
from datasets.filters import DatasetFilterSet
from datasets.models import Dataset, DatasetFile, DatasetVersion, UploadSession
from datasets.services import archives, bucket_imports, catalog, uploads, versions
from projects.models import Project
from projects.permissions import get_object_for_user, token_of


class DatasetSerializer(serializers.ModelSerializer):
    project = VisibleRelatedField(queryset=Project.objects.all())
    tenant = serializers.IntegerField(source="project.tenant_id", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    tags = serializers.ListField(child=serializers.CharField(max_length=50), required=False)

    class Meta:
        model = Dataset
        fields = [
            "id",
            "tenant",
            "project",
            "name",
            "slug",
            "description",
            "tags",
            "licence",
            "created_by",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]
        validators = []


class DatasetUpdateSerializer(DatasetSerializer):
    class Meta(DatasetSerializer.Meta):
        read_only_fields = ["id", "project", "slug", "created_at"]


class DatasetVersionSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = DatasetVersion
        fields = [
            "id",
            "dataset",
            "number",
            "parent",
            "source",
            "source_detail",
            "message",
            "file_count",
            "total_size",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class DatasetFileSerializer(serializers.ModelSerializer):
    sha256 = serializers.CharField(source="blob_id", read_only=True)

    class Meta:
        model = DatasetFile
        fields = ["id", "version", "path", "size", "sha256"]
        read_only_fields = fields


class UploadFileInSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=2000, trim_whitespace=False)
    size = serializers.IntegerField(min_value=0)
    sha256 = serializers.CharField(required=False, allow_blank=True, max_length=64)


class UploadStartSerializer(serializers.Serializer):
    dataset = serializers.IntegerField()
    files = UploadFileInSerializer(many=True, allow_empty=True)
    parent = serializers.CharField(required=False, default="latest")
    remove = serializers.ListField(
        child=serializers.CharField(trim_whitespace=False),
        required=False,
        help_text="Files or folders of the parent the new version drops.",
    )
    exact = serializers.BooleanField(
        required=False,
        default=False,
        help_text="The new version holds exactly `files`: the parent's other files are dropped.",
    )
    message = serializers.CharField(required=False, allow_blank=True, max_length=500)


class SignSerializer(serializers.Serializer):
    file = serializers.IntegerField()
    numbers = serializers.ListField(child=serializers.IntegerField(), max_length=1000)


class CompletePartSerializer(serializers.Serializer):
    file = serializers.IntegerField()
    number = serializers.IntegerField()
    sha256 = serializers.CharField(max_length=64)
    etag = serializers.CharField(required=False, allow_blank=True, max_length=200)


class UploadStatusSerializer(serializers.Serializer):
    """GET /uploads/{id}/: the session and which parts of which files arrived."""

    id = serializers.IntegerField()
    dataset = serializers.IntegerField()
    state = serializers.CharField()
    error = serializers.CharField()
    backend = serializers.CharField()
    part_size = serializers.IntegerField()
    version = serializers.IntegerField(allow_null=True)
    files = serializers.ListField(child=serializers.DictField())


class CopySerializer(serializers.Serializer):
    source = serializers.IntegerField(help_text="id of the version to copy")
    message = serializers.CharField(required=False, allow_blank=True, max_length=500)


class FromJobSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    message = serializers.CharField(required=False, allow_blank=True, max_length=500)


class ArchiveSerializer(serializers.Serializer):
    archive = serializers.FileField()
    parent = serializers.CharField(required=False, default="latest")


class BucketImportSerializer(serializers.Serializer):
    prefix = serializers.CharField(max_length=1024, trim_whitespace=False)
    parent = serializers.CharField(required=False, default="latest")


def bucket_import_data(imp) -> dict:
    return {
        "id": imp.pk,
        "dataset": imp.dataset_id,
        "prefix": imp.prefix,
        "state": imp.state,
        "error": imp.error,
        "files_total": imp.files_total,
        "files_done": imp.files_done,
        "bytes_total": imp.bytes_total,
        "bytes_done": imp.bytes_done,
        "bytes_copied": imp.bytes_copied,
        "version": imp.version_id,
    }


class StorageUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The object store cannot be reached; nothing was changed. Try again shortly."
    default_code = "storage_unavailable"


def storage_unavailable(exc):
    """An object store that is down is a 503 with a message, never a 500."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, BotoCoreError | ClientError | ConnectionError):
        return StorageUnavailable()
    return exc


class DatasetViewSet(RestrictedViewSetMixin, viewsets.ModelViewSet):
    queryset = Dataset.objects.none()
    filterset_class = DatasetFilterSet
    permission_actions = {
        "list": "dataset.view",
        "retrieve": "dataset.view",
        "create": "dataset.create",
        "update": "dataset.create",
        "partial_update": "dataset.create",
        "destroy": "dataset.delete",
        "copy": "dataset.create",
        "from_job": "dataset.create",
        "archive": "dataset.create",
        "import_prefix": bucket_imports.BUCKET_IMPORT_ACTION,
        "bucket_import": "dataset.view",
    }

    def get_queryset(self):
        return super().get_queryset().select_related("project", "created_by")

    def get_serializer_class(self):
        if self.action in ("update", "partial_update"):
            return DatasetUpdateSerializer
        return DatasetSerializer

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        project = get_object_for_user(
            self.request.user,
            Project,
            "dataset.create",
            token=token_of(self.request),
            pk=data.pop("project").pk,
        )
        serializer.instance = catalog.create_dataset(self.request.user, project, **data)

    def perform_update(self, serializer):
        serializer.instance = catalog.update_dataset(
            self.request.user, serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        catalog.delete_dataset(self.request.user, instance)

    @extend_schema(request=CopySerializer, responses={201: DatasetVersionSerializer})
    @action(detail=True, methods=["post"])
    def copy(self, request, pk=None):
        """A new version holding exactly the files of another version (no bytes move)."""
        dataset = self.get_object()
        body = CopySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        source = get_object_for_user(
            request.user,
            DatasetVersion,
            "dataset.view",
            token=token_of(request),
            pk=body.validated_data["source"],
        )
        version = versions.copy_version(
            request.user, source, dataset, body.validated_data.get("message", "")
        )
        return Response(DatasetVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=FromJobSerializer, responses={201: DatasetVersionSerializer})
    @action(detail=True, methods=["post"], url_path="from-job")
    def from_job(self, request, pk=None):
        """Save a job's output files as a new version."""
        dataset = self.get_object()
        body = FromJobSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = registry.job_with_outputs(
            request.user, body.validated_data["job"], token=token_of(request)
        )
        version = versions.save_job_outputs(
            request.user, job, dataset, body.validated_data.get("message", "")
        )
        return Response(DatasetVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(request={"multipart/form-data": ArchiveSerializer}, responses={202: None})
    @action(
        detail=True,
        methods=["post"],
        parser_classes=[parsers.MultiPartParser, parsers.FormParser, JSONParser],
    )
    def archive(self, request, pk=None):
        """Upload a zip / tar / tar.gz; a background task unpacks it into a new version."""
        dataset = self.get_object()
        body = ArchiveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        archive = archives.start_archive_import(
            request.user, dataset, body.validated_data["archive"], body.validated_data["parent"]
        )
        return Response({"id": archive.pk, "state": archive.state}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=BucketImportSerializer, responses={202: None})
    @action(detail=True, methods=["post"], url_path="import-prefix")
    def import_prefix(self, request, pk=None):
        """Copy the objects under an allowed prefix of the bucket into a new version
        (maintainers; a background task hashes them and records its progress)."""
        dataset = self.get_object()
        body = BucketImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        imp = bucket_imports.start_bucket_import(
            request.user, dataset, body.validated_data["prefix"], body.validated_data["parent"]
        )
        return Response(bucket_import_data(imp), status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses={200: None})
    @action(detail=True, methods=["get"], url_path=r"bucket-imports/(?P<import_id>\d+)")
    def bucket_import(self, request, pk=None, import_id=None):
        """Progress of a bucket prefix import."""
        dataset = self.get_object()
        imp = get_object_or_404(dataset.bucket_imports.all(), pk=import_id)
        return Response(bucket_import_data(imp))


@id_filter("dataset", "this dataset's versions")
class DatasetVersionViewSet(RestrictedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    queryset = DatasetVersion.objects.none()
    scope_field = "dataset__project"
    serializer_class = DatasetVersionSerializer
    permission_actions = {
        "list": "dataset.view",
        "retrieve": "dataset.view",
        "download": "dataset.view",
    }

    def get_queryset(self):
        queryset = super().get_queryset().select_related("dataset__project", "created_by")
        dataset = int_param(self.request, "dataset")
        if dataset is not None:
            queryset = queryset.filter(dataset_id=dataset)
        return queryset

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        """The whole version as a zip, streamed (never built in memory or on disk)."""
        return downloads.version_zip(self.get_object())


class DatasetFileViewSet(RestrictedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    queryset = DatasetFile.objects.none()
    scope_field = "version__dataset__project"
    serializer_class = DatasetFileSerializer
    permission_actions = {
        "list": "dataset.view",
        "retrieve": "dataset.view",
        "download": "dataset.view",
    }

    @extend_schema(
        parameters=[
            OpenApiParameter("version", WHOLE_NUMBER, description="files of this version"),
            OpenApiParameter("prefix", OpenApiTypes.STR, description="paths starting with this"),
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    def get_queryset(self):
        queryset = super().get_queryset().select_related("version__dataset__project")
        version = int_param(self.request, "version")
        if version is not None:
            queryset = queryset.filter(version_id=version)
        prefix = self.request.query_params.get("prefix")
        if prefix:
            queryset = queryset.filter(path__startswith=prefix)
        return queryset

    @extend_schema(
        responses={
            **FILE_DOWNLOAD,
            302: OpenApiResponse(
                description="On S3 storage: a redirect to a presigned URL of the file."
            ),
        }
    )
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        return downloads.file_response(self.get_object())


class UploadSessionViewSet(RestrictedViewSetMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    queryset = UploadSession.objects.none()
    scope_field = "dataset__project"
    serializer_class = UploadStartSerializer
    permission_actions = {
        "create": "dataset.create",
        "retrieve": "dataset.view",
        "sign": "dataset.create",
        "part": "dataset.create",
        "complete_part": "dataset.create",
        "commit": "dataset.create",
        "abort": "dataset.create",
    }

    def get_queryset(self):
        return super().get_queryset().select_related("dataset__project")

    def handle_exception(self, exc):
        return super().handle_exception(storage_unavailable(exc))

    def _file(self, session, file_id):
        try:
            return get_object_or_404(session.files, pk=int(file_id))
        except (TypeError, ValueError):
            raise serializers.ValidationError({"file": "A file id is required."}) from None

    @extend_schema(
        request=UploadStartSerializer,
        responses={201: UploadStatusSerializer, 409: OpenApiTypes.OBJECT},
        description="409 {detail, code: unchanged, version, number}: the version it would make "
        "exists already (every file its parent's by sha256, nothing removed); nothing is created.",
    )
    def create(self, request, *args, **kwargs):
        body = UploadStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        dataset = get_object_for_user(
            request.user, Dataset, "dataset.create", token=token_of(request), pk=data["dataset"]
        )
        try:
            session = uploads.start_upload(
                request.user,
                dataset,
                files=[dict(f) for f in data["files"]],
                parent=data.get("parent", "latest"),
                remove=data.get("remove", []),
                exact=data["exact"],
                message=data.get("message", ""),
            )
        except uploads.NothingChanged as exc:
            # Not an error of the request's shape: the version it asks for exists already.
            body = {"detail": exc.message, "code": "unchanged", "version": exc.parent.pk,
                    "number": exc.parent.number}  # fmt: skip
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(uploads.upload_status(session), status=status.HTTP_201_CREATED)

    @extend_schema(responses=UploadStatusSerializer)
    def retrieve(self, request, pk=None):
        return Response(uploads.upload_status(self.get_object()))

    @extend_schema(request=SignSerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def sign(self, request, pk=None):
        """S3: presigned URLs to PUT parts straight to the object store."""
        session = self.get_object()
        body = SignSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        file = self._file(session, body.validated_data["file"])
        urls = uploads.sign_parts(request.user, session, file, body.validated_data["numbers"])
        return Response({"urls": {str(n): url for n, url in urls.items()}})

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[
            OpenApiParameter("file", OpenApiTypes.INT, required=True),
            OpenApiParameter("number", OpenApiTypes.INT, required=True),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["put"], parser_classes=[parsers.FileUploadParser])
    def part(self, request, pk=None):
        """Filesystem: one part's raw bytes, with its sha256 in X-Part-Sha256."""
        session = self.get_object()
        file = self._file(session, request.query_params.get("file"))
        try:
            number = int(request.query_params.get("number", ""))
        except ValueError:
            raise serializers.ValidationError({"number": "A part number is required."}) from None
        # Read the raw body as a stream: DRF's parsers would buffer the whole part.
        stream = request._request
        part = uploads.receive_part(
            request.user, session, file, number, stream, request.headers.get("X-Part-Sha256", "")
        )
        return Response({"file": file.pk, "number": part.number, "size": part.size})

    @extend_schema(request=CompletePartSerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], url_path="complete-part")
    def complete_part(self, request, pk=None):
        """S3: a part was PUT to its presigned URL."""
        session = self.get_object()
        body = CompletePartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        file = self._file(session, data["file"])
        part = uploads.record_part(
            request.user, session, file, data["number"], data["sha256"], data.get("etag", "")
        )
        return Response({"file": file.pk, "number": part.number, "size": part.size})

    @extend_schema(request=None, responses={202: UploadStatusSerializer})
    @action(detail=True, methods=["post"])
    def commit(self, request, pk=None):
        session = uploads.commit_upload(request.user, self.get_object())
        return Response(uploads.upload_status(session), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=UploadStatusSerializer)
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        session = uploads.abort_upload(request.user, self.get_object())
        return Response(uploads.upload_status(session))
