"""The model hub API: thin serializers and viewsets over modelhub.services."""

from django.db import transaction
from django.http import FileResponse, Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api import (
    FILE_DOWNLOAD,
    RestrictedViewSetMixin,
    VisibleRelatedField,
    id_filter,
    int_param,
)
from images.models import RuntimeImage
from jobs.api import JobSerializer, check_mounts_within_token
from jobs.models import Job
from modelhub import services
from modelhub.filters import RegisteredModelFilterSet
from modelhub.models import Alias, ModelFile, ModelVersion, RegisteredModel
from projects.models import Project
from projects.permissions import get_object_for_user, token_of


class AliasSerializer(serializers.ModelSerializer):
    version = serializers.IntegerField(source="version.number", read_only=True)

    class Meta:
        model = Alias
        fields = ["name", "version", "updated_at"]


class RegisteredModelSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="project.tenant_id", read_only=True)
    aliases = AliasSerializer(many=True, read_only=True)

    class Meta:
        model = RegisteredModel
        fields = [
            "id",
            "tenant",
            "project",
            "name",
            "description",
            "card",
            "tags",
            "aliases",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class RegisteredModelWriteSerializer(serializers.Serializer):
    project = VisibleRelatedField(queryset=Project.objects.all(), required=False)
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    card = serializers.CharField(required=False, allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField(), required=False)


class ModelFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelFile
        fields = ["path", "size", "sha256"]


class ModelVersionSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="model.project.tenant_id", read_only=True)
    files = ModelFileSerializer(many=True, read_only=True)

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "tenant",
            "model",
            "number",
            "format",
            "primary_file",
            "description",
            "tags",
            "size",
            "metrics",
            "source_job",
            "parameters",
            "image_reference",
            "image_digest",
            "inputs",
            "files",
            "created_at",
        ]
        read_only_fields = fields


class ModelVersionCreateSerializer(serializers.Serializer):
    """From a job (`job`, with `model` or `model_name`) or from uploaded `files` (`model`)."""

    model = VisibleRelatedField(queryset=RegisteredModel.objects.all(), required=False)
    model_name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    job = VisibleRelatedField(queryset=Job.objects.all(), required=False)
    paths = serializers.ListField(child=serializers.CharField(), required=False)
    files = serializers.ListField(child=serializers.FileField(), required=False)
    description = serializers.CharField(required=False, allow_blank=True, max_length=500)
    tags = serializers.ListField(child=serializers.CharField(), required=False)


class AliasWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64)
    version = serializers.IntegerField(min_value=1)


class CompareRowSerializer(serializers.Serializer):
    name = serializers.CharField()
    a = serializers.JSONField()
    b = serializers.JSONField()
    same = serializers.BooleanField()


class CompareSerializer(serializers.Serializer):
    metrics = CompareRowSerializer(many=True)
    parameters = CompareRowSerializer(many=True)


class PredictSerializer(serializers.Serializer):
    command = serializers.CharField()
    image = VisibleRelatedField(
        queryset=RuntimeImage.objects.all(), required=False, allow_null=True
    )
    inputs = serializers.JSONField(required=False)
    parameters = serializers.JSONField(required=False)
    gpus = serializers.IntegerField(required=False, min_value=0)
    code_snapshot = serializers.IntegerField(
        required=False, allow_null=True, help_text="A ready code snapshot of the model's project."
    )


class RegisteredModelViewSet(
    RestrictedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,
):
    queryset = RegisteredModel.objects.none()
    filterset_class = RegisteredModelFilterSet
    http_method_names = ["get", "post", "patch", "delete"]
    permission_actions = {
        "list": "model.view",
        "retrieve": "model.view",
        "create": "model.register",
        "partial_update": "model.register",
        "destroy": "model.delete",
        "alias": "model.alias",
        "compare": "model.view",
    }

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .select_related("project")
            .prefetch_related("aliases__version")
        )

    def get_serializer_class(self):
        if self.action in ("create", "partial_update"):
            return RegisteredModelWriteSerializer
        return RegisteredModelSerializer

    @extend_schema(
        request=RegisteredModelWriteSerializer, responses={201: RegisteredModelSerializer}
    )
    def create(self, request, *args, **kwargs):
        serializer = RegisteredModelWriteSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        if "project" not in data:
            raise serializers.ValidationError({"project": "This field is required."})
        project = get_object_for_user(
            request.user, Project, "model.register", token=token_of(request), pk=data.pop("project").pk
        )
        model = services.create_model(request.user, project, **data)
        return Response(RegisteredModelSerializer(model).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RegisteredModelWriteSerializer, responses=RegisteredModelSerializer)
    def partial_update(self, request, *args, **kwargs):
        model = self.get_object()
        serializer = RegisteredModelWriteSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        data.pop("project", None)
        model = services.update_model(request.user, model, **data)
        return Response(RegisteredModelSerializer(model).data)

    def destroy(self, request, *args, **kwargs):
        services.delete_model(request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=AliasWriteSerializer, responses=RegisteredModelSerializer)
    @action(detail=True, methods=["post"])
    def alias(self, request, pk=None):
        """Point an alias at a version (creating or moving it); the move is recorded."""
        model = self.get_object()
        serializer = AliasWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.set_alias(
            request.user,
            model,
            serializer.validated_data["name"],
            serializer.validated_data["version"],
        )
        return Response(RegisteredModelSerializer(self.get_object()).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("a", OpenApiTypes.INT, description="default: the one before b"),
            OpenApiParameter("b", OpenApiTypes.INT, description="default: the latest"),
        ],
        responses=CompareSerializer,
    )
    @action(detail=True, methods=["get"])
    def compare(self, request, pk=None):
        model = self.get_object()
        a, b = services.pick_versions(
            model, request.query_params.get("a"), request.query_params.get("b")
        )
        if a is None:
            return Response({"metrics": [], "parameters": []})
        return Response(services.compare_versions(a, b))


@id_filter("model", "this model's versions")
class ModelVersionViewSet(RestrictedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = ModelVersion.objects.none()
    scope_field = "model__project"
    permission_actions = {
        "list": "model.view",
        "retrieve": "model.view",
        "create": "model.register",
        "download": "model.view",
        "predict": "job.submit",
    }

    def get_queryset(self):
        queryset = (
            super()
            .get_queryset()
            .select_related("model__project")
            .prefetch_related("files")
        )
        model = int_param(self.request, "model")
        if model is not None:
            queryset = queryset.filter(model_id=model)
        return queryset

    def get_serializer_class(self):
        return ModelVersionCreateSerializer if self.action == "create" else ModelVersionSerializer

    @extend_schema(request=ModelVersionCreateSerializer, responses={201: ModelVersionSerializer})
    def create(self, request, *args, **kwargs):
        serializer = ModelVersionCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user, token = request.user, token_of(request)
        model = data.get("model")
        if model is not None:
            model = get_object_for_user(
                user, RegisteredModel, "model.register", token=token, pk=model.pk
            )
        if data.get("job") is not None:
            job = get_object_for_user(user, Job, "model.register", token=token, pk=data["job"].pk)
            version = services.register_version_from_job(
                user,
                job,
                model=model,
                model_name=data.get("model_name", ""),
                paths=data.get("paths"),
                description=data.get("description", ""),
                tags=data.get("tags"),
            )
        elif model is not None:
            version = services.upload_version(
                user,
                model,
                [(f.name, f) for f in data.get("files", [])],
                description=data.get("description", ""),
                tags=data.get("tags"),
            )
        else:
            raise serializers.ValidationError(
                {"model": "Give a model (and files), or a job to register from."}
            )
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("path", OpenApiTypes.STR, required=True)],
        responses=FILE_DOWNLOAD,
    )
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        version = self.get_object()
        path = request.query_params.get("path") or version.primary_file
        found = version.files.filter(path=path).first()
        if found is None:
            raise Http404
        return FileResponse(
            found.file.open("rb"), as_attachment=True, filename=path.rsplit("/", 1)[-1]
        )

    @extend_schema(request=PredictSerializer, responses={201: JobSerializer})
    @action(detail=True, methods=["post"])
    def predict(self, request, pk=None):
        """Submit a prediction job with this version's files staged under model/."""
        version = self.get_object()
        serializer = PredictSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        image = data.pop("image", None)
        if image is not None:
            image = get_object_for_user(
                request.user, RuntimeImage, "image.view", token=token_of(request), pk=image.pk
            )
        with transaction.atomic():
            job = services.predict(request.user, version, image=image, **data)
            check_mounts_within_token(request, job)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)
