"""The code snapshot API (the `gantry` CLI and the job form's page speak it):

1. POST /snapshots/ {project, files: [{path, size, sha256, mode}], git} -> 201 with the
   contents still `missing` (none: the snapshot is ready at once).
2. PUT /snapshots/<id>/blobs/<sha256>, the raw bytes -> 204 (checked against the manifest).
   Many small contents at once: POST /snapshots/<id>/blobs, a tar whose members are named
   by their sha256 -> {"received": [...], "missing": [...]} (one bad member refuses all).
3. POST /snapshots/<id>/finalize -> the ready snapshot, or 400 naming what is missing.
4. GET /snapshots/<id> (with up to 1,000 files), GET /snapshots/?project=<id>.

Routed without a required trailing slash (`/?`): the contract names the paths bare.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, parsers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from core.api import RestrictedViewSetMixin
from projects.models import Project
from projects.permissions import get_object_for_user, token_of
from snapshots import services
from snapshots.models import CodeSnapshot

FILES_SHOWN = 1000


class UnreadBodyParser(parsers.BaseParser):
    """Leaves the body unread for the view, which streams it (a tar of contents). DRF
    parses POST bodies before the view runs when it checks a session's CSRF token."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


class SnapshotFileInSerializer(serializers.Serializer):
    path = serializers.CharField()
    size = serializers.IntegerField(min_value=0)
    sha256 = serializers.CharField()
    mode = serializers.IntegerField(required=False)


class GitSerializer(serializers.Serializer):
    commit = serializers.CharField(allow_blank=True)
    dirty = serializers.BooleanField(allow_null=True)
    branch = serializers.CharField(allow_blank=True)


class SnapshotCreateSerializer(serializers.Serializer):
    project = serializers.IntegerField()
    files = SnapshotFileInSerializer(many=True)
    git = GitSerializer(allow_null=True, required=False)


class SnapshotSerializer(serializers.ModelSerializer):
    """How a snapshot reads in lists; `snapshot_data` adds files and missing contents."""

    url = serializers.SerializerMethodField()
    git = serializers.SerializerMethodField()

    class Meta:
        model = CodeSnapshot
        fields = ["id", "project", "state", "digest", "file_count", "size", "git", "url",
                  "created_at", "ready_at"]
        read_only_fields = fields

    def get_url(self, obj) -> str:
        return obj.get_absolute_url()

    def get_git(self, obj) -> dict | None:
        if not obj.git_commit and obj.git_dirty is None and not obj.git_branch:
            return None
        return {"commit": obj.git_commit, "dirty": obj.git_dirty, "branch": obj.git_branch}


def snapshot_data(snapshot: CodeSnapshot, files: bool = False) -> dict:
    data = {**SnapshotSerializer(snapshot).data, "missing": services.missing_blobs(snapshot)}
    if files:
        rows = snapshot.files.order_by("path").values("path", "size", "sha256", "mode")
        data["files"] = list(rows[:FILES_SHOWN])
        data["files_truncated"] = snapshot.file_count > FILES_SHOWN
    return data


def _detail(exc: ValidationError) -> ValidationError:
    """A service's refusal as {"detail": "...", <field>: ...}: the one line a client prints."""
    if hasattr(exc, "message_dict"):
        body = dict(exc.message_dict)
        detail = body.pop("detail", None)
        text = detail[0] if detail else "; ".join(m for ms in body.values() for m in ms)
        extra = {k: (v if k == "missing" else " ".join(v)) for k, v in body.items()}
        return serializers.ValidationError({"detail": text, **extra})
    return serializers.ValidationError({"detail": " ".join(exc.messages)})


class SnapshotViewSet(
    RestrictedViewSetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    queryset = CodeSnapshot.objects.none()
    serializer_class = SnapshotSerializer
    filterset_fields = ["project"]
    permission_actions = {
        "list": "snapshot.view",
        "retrieve": "snapshot.view",
        "create": "snapshot.create",
        "blob": "snapshot.create",
        "blobs": "snapshot.create",
        "finalize": "snapshot.create",
    }

    def get_queryset(self):
        return super().get_queryset().select_related("project")

    def handle_exception(self, exc):
        if isinstance(exc, ValidationError):
            exc = _detail(exc)
        return super().handle_exception(exc)

    @extend_schema(request=SnapshotCreateSerializer, responses={201: SnapshotSerializer})
    def create(self, request, *args, **kwargs):
        body = request.data
        if not isinstance(body, dict):
            raise serializers.ValidationError({"detail": "A JSON object {project, files, git}."})
        project_id = body.get("project")
        if isinstance(project_id, bool) or not isinstance(project_id, int):
            raise serializers.ValidationError({"detail": "project: a project id.", "project": "A project id."})
        project = get_object_for_user(
            request.user, Project, "snapshot.create", token=token_of(request), pk=project_id
        )
        snapshot, _ = services.create_snapshot(
            request.user, project, body.get("files"), body.get("git")
        )
        return Response(snapshot_data(snapshot), status=status.HTTP_201_CREATED)

    @extend_schema(responses=SnapshotSerializer)
    def retrieve(self, request, *args, **kwargs):
        return Response(snapshot_data(self.get_object(), files=True))

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[OpenApiParameter("sha256", OpenApiTypes.STR, OpenApiParameter.PATH)],
        responses={204: None},
    )
    @action(
        detail=True,
        methods=["put"],
        url_path=r"blobs/(?P<sha256>[^/]+)",
        parser_classes=[parsers.FileUploadParser],
    )
    def blob(self, request, pk=None, sha256=None):
        """One missing content's raw bytes; checked against the manifest's sha256 and size."""
        snapshot = self.get_object()
        # The raw body as a stream: DRF's parsers would buffer it all.
        services.receive_blob(request.user, snapshot, sha256, request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # The body is a tar (any Content-Type; the schema says octet-stream, which clients and
    # schema tools know how to send).
    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["post"], url_path="blobs", parser_classes=[UnreadBodyParser])
    def blobs(self, request, pk=None):
        """Many missing contents in one tar (members named by sha256), each checked."""
        snapshot = self.get_object()
        received = services.receive_blobs(request.user, snapshot, request._request)
        return Response({"received": received, "missing": services.missing_blobs(snapshot)})

    @extend_schema(request=None, responses=SnapshotSerializer)
    @action(detail=True, methods=["post"])
    def finalize(self, request, pk=None):
        snapshot = services.finalize_snapshot(request.user, self.get_object())
        return Response(snapshot_data(snapshot))


router = SimpleRouter()
router.trailing_slash = "/?"  # the constructor only takes "/" or nothing
router.register("snapshots", SnapshotViewSet, basename="snapshot")
