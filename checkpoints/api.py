"""The checkpoint catalog in the API: complete checkpoints only, read-only (the executor
writes them through its own endpoints, checkpoints/executor_api.py)."""

from rest_framework import serializers, viewsets

from checkpoints.models import Checkpoint, CheckpointFile
from core.api import RestrictedViewSetMixin, id_filter, int_param


class CheckpointFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = CheckpointFile
        fields = ["path", "size", "sha256"]


class CheckpointSerializer(serializers.ModelSerializer):
    files = CheckpointFileSerializer(many=True, read_only=True)

    class Meta:
        model = Checkpoint
        fields = [
            "id",
            "job",
            "attempt",
            "name",
            "step",
            "metrics",
            "total_size",
            "on_preemption",
            "completed_at",
            "files",
        ]


@id_filter("job", "this job's checkpoints")
class CheckpointViewSet(RestrictedViewSetMixin, viewsets.ReadOnlyModelViewSet):
    """`?job=<id>` narrows the list to one job's checkpoints, newest first."""

    queryset = Checkpoint.objects.none()
    serializer_class = CheckpointSerializer
    scope_field = "job__project"
    permission_actions = {"list": "checkpoint.view", "retrieve": "checkpoint.view"}

    def get_queryset(self):
        queryset = super().get_queryset().complete().prefetch_related("files")
        job = int_param(self.request, "job") if hasattr(self, "request") else None
        if job is not None:
            queryset = queryset.filter(job_id=job)
        return queryset.order_by("-completed_at", "-pk")
