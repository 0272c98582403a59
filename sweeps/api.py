"""The sweeps API: thin serializers and a viewset over sweeps.services.

POST /api/v1/sweeps/ takes {"project": id, "source": "<YAML or JSON text>"} or
{"project": id, "spec": {...the same document as an object...}}: one format, the page's.
An optional "code_snapshot" (a ready snapshot of the project, as /api/v1/snapshots/ makes
and `gantry sweep start` sends) is staged in every trial, over the template's own."""

import json

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api import RestrictedViewSetMixin, VisibleRelatedField
from projects.models import Project
from projects.permissions import get_object_for_user, token_of
from sweeps import services
from sweeps.controller import best_trial
from sweeps.filters import SweepFilterSet
from sweeps.models import Sweep, Trial


class TrialSerializer(serializers.ModelSerializer):
    class Meta:
        model = Trial
        fields = ["number", "job", "state", "params", "objective", "reason", "created_at", "finished_at"]
        read_only_fields = fields


class SweepSerializer(serializers.ModelSerializer):
    tenant = serializers.IntegerField(source="project.tenant_id", read_only=True)
    url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = Sweep
        fields = [
            "id", "tenant", "project", "name", "state", "state_reason", "objective", "direction",
            "sampler", "pruner", "space", "template", "max_trials", "max_gpu_hours",
            "max_wall_seconds", "parallelism", "stop_after_failures", "seed", "created_at",
            "finished_at", "url",
        ]
        read_only_fields = fields


class SweepDetailSerializer(SweepSerializer):
    trials = TrialSerializer(many=True, read_only=True)
    best = serializers.SerializerMethodField()

    class Meta(SweepSerializer.Meta):
        fields = [*SweepSerializer.Meta.fields, "importance", "best", "trials"]
        read_only_fields = fields

    def get_best(self, sweep) -> dict | None:
        best = best_trial(sweep)
        return TrialSerializer(best).data if best else None


class SweepCreateSerializer(serializers.Serializer):
    project = VisibleRelatedField(queryset=Project.objects.all())
    source = serializers.CharField(required=False, max_length=64 * 1024, trim_whitespace=False)
    spec = serializers.DictField(required=False)
    code_snapshot = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="A ready code snapshot of the project (POST /api/v1/snapshots/), staged in "
        "every trial's working directory; it replaces template.code_snapshot.",
    )

    def validate(self, attrs):
        if ("source" in attrs) == ("spec" in attrs):
            raise serializers.ValidationError("Give the sweep as `source` (YAML/JSON text) or `spec` (an object), not both.")
        if "spec" in attrs:
            attrs["source"] = json.dumps(attrs.pop("spec"), indent=2)
        return attrs


class SweepViewSet(RestrictedViewSetMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Sweep.objects.none()
    filterset_class = SweepFilterSet
    permission_actions = {
        "list": "sweep.view",
        "retrieve": "sweep.view",
        "create": "sweep.create",
        "stop": "sweep.stop",
    }

    def get_queryset(self):
        queryset = super().get_queryset().select_related("project").order_by("-created_at", "-pk")
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("trials")
        return queryset

    def get_serializer_class(self):
        if self.action == "create":
            return SweepCreateSerializer
        if self.action == "retrieve":
            return SweepDetailSerializer
        return SweepSerializer

    @extend_schema(request=SweepCreateSerializer, responses={201: SweepDetailSerializer})
    def create(self, request, *args, **kwargs):
        serializer = SweepCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = get_object_for_user(
            request.user, Project, "sweep.create", token=token_of(request), pk=data["project"].pk
        )
        sweep = services.create_sweep(
            request.user, project, data["source"], code_snapshot=data.get("code_snapshot")
        )
        return Response(SweepDetailSerializer(sweep).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=SweepDetailSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        sweep = services.stop_sweep(request.user, self.get_object())
        return Response(SweepDetailSerializer(sweep).data)
