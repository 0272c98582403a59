"""The images API: thin serializers and viewsets over images.services."""

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.models import Tenant
from core.api import RestrictedViewSetMixin, VisibleRelatedField
from images import services
from images.filters import RuntimeImageFilterSet
from images.models import Framework, ImageBuild, ImageVisibility, RuntimeImage
from projects.permissions import get_object_for_user, token_of


class RuntimeImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = RuntimeImage
        fields = [
            "id",
            "tenant",
            "visibility",
            "name",
            "reference",
            "registry",
            "repository",
            "tag",
            "digest",
            "resolved_at",
            "framework",
            "framework_version",
            "cuda_version",
            "python_version",
            "description",
            "legacy",
            "local_env",
            "labels",
            "built_from",
            "created_at",
        ]
        read_only_fields = fields


class RuntimeImageCreateSerializer(serializers.Serializer):
    tenant = VisibleRelatedField(queryset=Tenant.objects.all())
    name = serializers.CharField(max_length=200)
    reference = serializers.CharField(max_length=500)
    framework = serializers.ChoiceField(choices=Framework.choices, default=Framework.CUSTOM)
    framework_version = serializers.CharField(required=False, allow_blank=True, max_length=32)
    cuda_version = serializers.CharField(required=False, allow_blank=True, max_length=16)
    python_version = serializers.CharField(required=False, allow_blank=True, max_length=16)
    description = serializers.CharField(required=False, allow_blank=True)
    local_env = serializers.CharField(required=False, allow_blank=True, max_length=500)
    resolve = serializers.BooleanField(required=False, default=False)


class RuntimeImageUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, max_length=200)
    framework = serializers.ChoiceField(choices=Framework.choices, required=False)
    framework_version = serializers.CharField(required=False, allow_blank=True, max_length=32)
    cuda_version = serializers.CharField(required=False, allow_blank=True, max_length=16)
    python_version = serializers.CharField(required=False, allow_blank=True, max_length=16)
    description = serializers.CharField(required=False, allow_blank=True)
    legacy = serializers.BooleanField(required=False)
    local_env = serializers.CharField(required=False, allow_blank=True, max_length=500)


class RegistrySerializer(serializers.Serializer):
    available = serializers.BooleanField()
    error = serializers.CharField(required=False)
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    digest = serializers.CharField(required=False)
    media_type = serializers.CharField(required=False)
    labels = serializers.DictField(child=serializers.CharField(), required=False)


class ImageBuildSerializer(serializers.ModelSerializer):
    class Meta:
        model = ImageBuild
        fields = [
            "id",
            "tenant",
            "base",
            "name",
            "target",
            "requirements",
            "files",
            "state",
            "progress",
            "step",
            "log",
            "error",
            "result",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class ImageBuildCreateSerializer(serializers.Serializer):
    tenant = VisibleRelatedField(queryset=Tenant.objects.all())
    base = VisibleRelatedField(queryset=RuntimeImage.objects.all())
    name = serializers.CharField(max_length=200)
    tag = serializers.CharField(required=False, allow_blank=True, max_length=128)
    requirements = serializers.CharField(required=False, allow_blank=True)
    files = serializers.ListField(child=serializers.FileField(), required=False)
    directory = serializers.CharField(required=False, default="/opt/app")


class RuntimeImageViewSet(
    RestrictedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,
):
    queryset = RuntimeImage.objects.none()
    public_rows = Q(visibility=ImageVisibility.PUBLIC)
    filterset_class = RuntimeImageFilterSet
    http_method_names = ["get", "post", "patch", "delete"]
    permission_actions = {
        "list": "image.view",
        "retrieve": "image.view",
        "create": "image.create",
        "partial_update": "image.change",
        "destroy": "image.delete",
        "resolve": "image.change",
        "registry": "image.view",
    }

    def get_serializer_class(self):
        if self.action == "create":
            return RuntimeImageCreateSerializer
        if self.action == "partial_update":
            return RuntimeImageUpdateSerializer
        return RuntimeImageSerializer

    @extend_schema(request=RuntimeImageCreateSerializer, responses={201: RuntimeImageSerializer})
    def create(self, request, *args, **kwargs):
        serializer = RuntimeImageCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        tenant = get_object_for_user(
            request.user, Tenant, "image.create", token=token_of(request), pk=data.pop("tenant").pk
        )
        image = services.create_image(request.user, tenant, **data)
        return Response(RuntimeImageSerializer(image).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RuntimeImageUpdateSerializer, responses=RuntimeImageSerializer)
    def partial_update(self, request, *args, **kwargs):
        image = self.get_object()
        serializer = RuntimeImageUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        image = services.update_image(request.user, image, **serializer.validated_data)
        return Response(RuntimeImageSerializer(image).data)

    def destroy(self, request, *args, **kwargs):
        image = self.get_object()
        from_registry = request.query_params.get("from_registry") in ("1", "true")
        services.delete_image(request.user, image, from_registry=from_registry)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=RuntimeImageSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request, pk=None):
        image = services.resolve_image(request.user, self.get_object())
        return Response(RuntimeImageSerializer(image).data)

    @extend_schema(responses=RegistrySerializer)
    @action(detail=True, methods=["get"])
    def registry(self, request, pk=None):
        """Live tags, manifest digest and labels from Gantry's registry (`error` when the
        registry cannot be asked: none configured, another registry, or a failure)."""
        details = services.registry_details(self.get_object())
        if "error" in details:
            return Response({"available": False, "error": details["error"]})
        manifest = details["manifest"]
        return Response(
            {
                "available": True,
                "tags": details["tags"],
                "digest": manifest.digest,
                "media_type": manifest.media_type,
                "labels": details["labels"],
            }
        )


class ImageBuildViewSet(RestrictedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = ImageBuild.objects.none()
    serializer_class = ImageBuildSerializer
    permission_actions = {"list": "image.view", "retrieve": "image.view", "create": "image.create"}

    def get_queryset(self):
        return super().get_queryset().select_related("base")

    def get_serializer_class(self):
        return ImageBuildCreateSerializer if self.action == "create" else ImageBuildSerializer

    @extend_schema(request=ImageBuildCreateSerializer, responses={201: ImageBuildSerializer})
    def create(self, request, *args, **kwargs):
        serializer = ImageBuildCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        tenant = get_object_for_user(
            request.user, Tenant, "image.create", token=token_of(request), pk=data["tenant"].pk
        )
        base = get_object_for_user(
            request.user, RuntimeImage, "image.view", token=token_of(request), pk=data["base"].pk
        )
        directory = data["directory"].rstrip("/")
        build = services.start_build(
            request.user,
            base,
            tenant,
            name=data["name"],
            tag=data.get("tag", ""),
            requirements=data.get("requirements", ""),
            files=[(f"{directory}/{f.name}", f) for f in data.get("files", [])],
        )
        return Response(ImageBuildSerializer(build).data, status=status.HTTP_201_CREATED)
