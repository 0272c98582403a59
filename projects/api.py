from django.contrib.auth import get_user_model
from rest_framework import serializers, viewsets

from accounts.api import MemberSerializer, MemberViewSetMixin, member_actions
from accounts.models import Tenant
from core.api import RestrictedViewSetMixin, VisibleRelatedField
from projects import services
from projects.filters import ProjectFilterSet, ProjectMemberFilterSet
from projects.models import Project, ProjectMember
from projects.permissions import get_object_for_user, token_of

User = get_user_model()


class ProjectSerializer(serializers.ModelSerializer):
    tenant = VisibleRelatedField(queryset=Tenant.objects.all())
    tenant_slug = serializers.CharField(source="tenant.slug", read_only=True)

    class Meta:
        model = Project
        fields = [
            "id",
            "tenant",
            "tenant_slug",
            "name",
            "slug",
            "description",
            "visibility",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]
        validators = []


class ProjectUpdateSerializer(ProjectSerializer):
    class Meta(ProjectSerializer.Meta):
        read_only_fields = ["id", "tenant", "created_at"]


class ProjectMemberSerializer(MemberSerializer):
    class Meta(MemberSerializer.Meta):
        model = ProjectMember
        fields = ["id", "project", "user", "role", "created_at"]


class ProjectMemberUpdateSerializer(ProjectMemberSerializer):
    class Meta(ProjectMemberSerializer.Meta):
        read_only_fields = ["id", "project", "user", "created_at"]


class ProjectViewSet(RestrictedViewSetMixin, viewsets.ModelViewSet):
    queryset = Project.objects.none()  # for the schema; requests use get_queryset
    filterset_class = ProjectFilterSet
    permission_actions = {
        "list": "project.view",
        "retrieve": "project.view",
        "create": "project.create",
        "update": "project.change",
        "partial_update": "project.change",
        "destroy": "project.delete",
    }

    def get_queryset(self):
        return super().get_queryset().select_related("tenant")

    def get_serializer_class(self):
        return (
            ProjectUpdateSerializer
            if self.action in ("update", "partial_update")
            else ProjectSerializer
        )

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        tenant = get_object_for_user(
            self.request.user,
            Tenant,
            "project.create",
            token=token_of(self.request),
            pk=data.pop("tenant").pk,
        )
        serializer.instance = services.create_project(
            actor=self.request.user, tenant=tenant, **data
        )

    def perform_update(self, serializer):
        serializer.instance = services.update_project(
            actor=self.request.user, project=serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.delete_project(actor=self.request.user, project=instance)


class ProjectMemberViewSet(MemberViewSetMixin, RestrictedViewSetMixin, viewsets.ModelViewSet):
    queryset = ProjectMember.objects.none()
    serializer_class = ProjectMemberSerializer
    update_serializer_class = ProjectMemberUpdateSerializer
    filterset_class = ProjectMemberFilterSet
    permission_actions = member_actions("projectmember")
    members = services.PROJECT_MEMBERS
