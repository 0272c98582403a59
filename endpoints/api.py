"""The endpoints API: thin serializers and a viewset over endpoints.services.

Calling an endpoint is not here: that is the gateway, /serve/<tenant>/<project>/<name>/.
"""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api import RestrictedViewSetMixin, VisibleRelatedField
from endpoints import rollout, services, traffic
from endpoints.models import Endpoint, EndpointRequest
from modelhub.models import RegisteredModel
from projects.models import Project
from projects.permissions import get_object_for_user, token_of


class EndpointSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="project.tenant_id", read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)
    version = serializers.IntegerField(source="version.number", read_only=True, allow_null=True)
    serving_version = serializers.IntegerField(
        source="serving_version.number", read_only=True, allow_null=True
    )
    canary_serving_version = serializers.IntegerField(
        source="canary_serving_version.number", read_only=True, allow_null=True
    )
    state = serializers.SerializerMethodField()
    gateway_path = serializers.CharField(read_only=True)
    url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = Endpoint
        fields = [
            "id",
            "tenant",
            "project",
            "name",
            "model",
            "model_name",
            "alias",
            "version",
            "canary_alias",
            "canary_percent",
            "replicas",
            "cpus",
            "memory_mb",
            "gpus",
            "idle_seconds",
            "rate_limit",
            "backend",
            "state",
            "state_reason",
            "serving_version",
            "canary_serving_version",
            "last_cold_start_ms",
            "gateway_path",
            "created_at",
            "url",
        ]
        read_only_fields = fields

    def get_state(self, endpoint) -> str:
        return rollout.live_state(endpoint)


class EndpointWriteSerializer(serializers.Serializer):
    alias = serializers.CharField(required=False, allow_blank=True, max_length=64)
    version = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=2**31 - 1
    )
    canary_alias = serializers.CharField(required=False, allow_blank=True, max_length=64)
    canary_percent = serializers.IntegerField(required=False, min_value=0, max_value=100)
    replicas = serializers.IntegerField(required=False, min_value=1, max_value=16)
    cpus = serializers.IntegerField(required=False, min_value=1, max_value=64)
    memory_mb = serializers.IntegerField(required=False, min_value=128, max_value=1024 * 1024)
    gpus = serializers.IntegerField(required=False, min_value=0, max_value=16)
    idle_seconds = serializers.IntegerField(required=False, min_value=0, max_value=30 * 24 * 3600)
    rate_limit = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)


class EndpointCreateSerializer(EndpointWriteSerializer):
    project = VisibleRelatedField(queryset=Project.objects.all())
    name = serializers.CharField(max_length=50)
    model = serializers.IntegerField(min_value=1, max_value=2**63 - 1)


class EndpointRequestSerializer(serializers.ModelSerializer):
    class Meta:
        model = EndpointRequest
        fields = [
            "at",
            "method",
            "path",
            "status",
            "latency_ms",
            "version_number",
            "canary",
            "cold_start",
        ]
        read_only_fields = fields


class VersionSummarySerializer(serializers.Serializer):
    version = serializers.IntegerField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_rate = serializers.FloatField()
    p50_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)


class EndpointTrafficSerializer(serializers.Serializer):
    requests = EndpointRequestSerializer(many=True)
    versions = VersionSummarySerializer(many=True)


class EndpointTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)


class EndpointTokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    secret = serializers.CharField(help_text="Shown once: Authorization: Bearer <secret>.")


def _service_errors(call):
    try:
        return call()
    except DjangoValidationError as exc:
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        raise serializers.ValidationError(detail) from None


class EndpointViewSet(
    RestrictedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,
):
    queryset = Endpoint.objects.none()
    http_method_names = ["get", "post", "patch", "delete"]
    permission_actions = {
        "list": "endpoint.view",
        "retrieve": "endpoint.view",
        "requests": "endpoint.view",
        "create": "endpoint.manage",
        "partial_update": "endpoint.manage",
        "destroy": "endpoint.manage",
        "tokens": "endpoint.manage",
    }

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .select_related(
                "project__tenant", "model", "version", "serving_version", "canary_serving_version"
            )
            .order_by("project", "name")
        )

    def get_serializer_class(self):
        if self.action == "create":
            return EndpointCreateSerializer
        if self.action == "partial_update":
            return EndpointWriteSerializer
        return EndpointSerializer

    @extend_schema(request=EndpointCreateSerializer, responses={201: EndpointSerializer})
    def create(self, request, *args, **kwargs):
        serializer = EndpointCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        project = get_object_for_user(
            request.user,
            Project,
            "endpoint.manage",
            token=token_of(request),
            pk=data.pop("project").pk,
        )
        model = RegisteredModel.objects.filter(project=project, pk=data.pop("model")).first()
        if model is None:
            raise serializers.ValidationError({"model": "No such model in that project."})
        endpoint = _service_errors(
            lambda: services.create_endpoint(
                request.user, project, name=data.pop("name"), model=model, **data
            )
        )
        return Response(EndpointSerializer(endpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=EndpointWriteSerializer, responses=EndpointSerializer)
    def partial_update(self, request, *args, **kwargs):
        endpoint = self.get_object()
        serializer = EndpointWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        endpoint = _service_errors(
            lambda: services.update_endpoint(request.user, endpoint, **serializer.validated_data)
        )
        return Response(EndpointSerializer(endpoint).data)

    def destroy(self, request, *args, **kwargs):
        services.delete_endpoint(request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=EndpointTrafficSerializer)
    @action(detail=True, methods=["get"])
    def requests(self, request, pk=None):
        """The last requests through the gateway (status and timing, never bodies), and
        the totals per version."""
        endpoint = self.get_object()
        rows = endpoint.requests.all()[:200]
        return Response(
            EndpointTrafficSerializer(
                {"requests": rows, "versions": traffic.summary(endpoint)}
            ).data
        )

    @extend_schema(request=EndpointTokenCreateSerializer, responses={201: EndpointTokenSerializer})
    @action(detail=True, methods=["post"])
    def tokens(self, request, pk=None):
        """A token that calls this endpoint only (for another service); the secret is shown once."""
        endpoint = self.get_object()
        serializer = EndpointTokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, secret = _service_errors(
            lambda: services.create_endpoint_token(
                request.user, endpoint, serializer.validated_data["name"]
            )
        )
        return Response(
            {"id": token.pk, "name": token.name, "secret": secret}, status=status.HTTP_201_CREATED
        )
