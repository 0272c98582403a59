from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, serializers, viewsets
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from accounts import invitations, services
from accounts.filters import ApiTokenFilterSet, MembershipFilterSet, TenantFilterSet
from accounts.members import MemberService
from accounts.models import ApiToken, Invitation, Membership, Tenant, TokenScope
from core.access import get_object_for_user, token_of
from core.api import RestrictedViewSetMixin, VisibleRelatedField

User = get_user_model()
# What a token may be limited to (a project); accounts sits below the app that defines it.
Project = ApiToken._meta.get_field("project").related_model


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ["id", "name", "slug", "description", "created_at"]
        read_only_fields = ["id", "created_at"]
        # Uniqueness is checked by the service, which answers with the same 400.
        extra_kwargs = {"slug": {"validators": []}}


class MemberSerializer(serializers.ModelSerializer):
    """A member row of any place (a tenant, a project; `Meta.model` is an accounts Member):
    the place's id among the places the user sees, the user's name, and the role, the
    kind's default role when none is given."""

    class Meta:
        read_only_fields = ["id", "created_at"]
        validators = []

    def get_fields(self):
        fields = super().get_fields()
        model = self.Meta.model
        places = model._meta.get_field(model.place_field).related_model.objects.all()
        role = model._meta.get_field("role")
        fields[model.place_field] = VisibleRelatedField(queryset=places)
        fields["user"] = serializers.SlugRelatedField(
            slug_field="username", queryset=User.objects.all()
        )
        fields["role"] = serializers.ChoiceField(choices=role.choices, default=role.default)
        return fields


class MembershipSerializer(MemberSerializer):
    class Meta(MemberSerializer.Meta):
        model = Membership
        fields = ["id", "tenant", "user", "role", "created_at"]


class MembershipUpdateSerializer(serializers.ModelSerializer):
    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "role", "created_at"]
        read_only_fields = ["id", "tenant", "user", "created_at"]


class ApiTokenSerializer(serializers.ModelSerializer):
    project = VisibleRelatedField(queryset=Project.objects.all(), required=False, allow_null=True)
    status = serializers.CharField(read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "key_prefix",
            "scope",
            "project",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "status",
        ]
        read_only_fields = [
            "id",
            "key_prefix",
            "created_at",
            "last_used_at",
            "revoked_at",
            "status",
        ]


class NewApiTokenSerializer(ApiTokenSerializer):
    key = serializers.CharField(read_only=True, help_text="The secret. Shown once, never again.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "key"]


class TenantViewSet(RestrictedViewSetMixin, viewsets.ModelViewSet):
    queryset = Tenant.objects.none()  # for the schema; requests use get_queryset
    serializer_class = TenantSerializer
    filterset_class = TenantFilterSet
    permission_actions = {
        "list": "tenant.view",
        "retrieve": "tenant.view",
        "create": "authenticated",
        "update": "tenant.change",
        "partial_update": "tenant.change",
        "destroy": "tenant.delete",
    }

    def perform_create(self, serializer):
        serializer.instance = services.create_tenant(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer):
        serializer.instance = services.update_tenant(
            actor=self.request.user, tenant=serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.delete_tenant(actor=self.request.user, tenant=instance)


def member_actions(kind: str) -> dict[str, str]:
    """The matrix actions of a members endpoint: `<kind>.view` to read, `<kind>.manage` to
    add, change and remove."""
    return {
        "list": f"{kind}.view",
        "retrieve": f"{kind}.view",
        "create": f"{kind}.manage",
        "update": f"{kind}.manage",
        "partial_update": f"{kind}.manage",
        "destroy": f"{kind}.manage",
    }


class MemberViewSetMixin:
    """A place's members (a tenant's, a project's), each write through the kind's
    `accounts.members.MemberService` (`members`). The place is looked up again with the
    manage action (404 for what the user cannot see, 403 for what they may not change)."""

    members: MemberService
    update_serializer_class = None

    def get_queryset(self):
        return super().get_queryset().select_related("user", self.members.model.place_field)

    def get_serializer_class(self):
        if self.action in ("update", "partial_update"):
            return self.update_serializer_class
        return self.serializer_class

    def perform_create(self, serializer):
        data = serializer.validated_data
        place_field = self.members.model.place_field
        place = get_object_for_user(
            self.request.user,
            self.members.model._meta.get_field(place_field).related_model,
            self.members.manage,
            token=token_of(self.request),
            pk=data[place_field].pk,
        )
        serializer.instance = self.members.add(
            actor=self.request.user, place=place, user=data["user"], role=data["role"]
        )

    def perform_update(self, serializer):
        role = serializer.validated_data.get("role", serializer.instance.role)
        serializer.instance = self.members.change_role(
            actor=self.request.user, member=serializer.instance, role=role
        )

    def perform_destroy(self, instance):
        self.members.remove(actor=self.request.user, member=instance)


class MembershipViewSet(MemberViewSetMixin, RestrictedViewSetMixin, viewsets.ModelViewSet):
    queryset = Membership.objects.none()
    serializer_class = MembershipSerializer
    update_serializer_class = MembershipUpdateSerializer
    filterset_class = MembershipFilterSet
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]
    permission_actions = member_actions("membership")
    members = services.TENANT_MEMBERS


class ApiTokenViewSet(
    RestrictedViewSetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Personal API tokens. DELETE revokes (the row is kept for the record)."""

    queryset = ApiToken.objects.none()
    serializer_class = ApiTokenSerializer
    filterset_class = ApiTokenFilterSet
    throttle_scope = "token_create"
    permission_actions = {"*": "authenticated"}

    def get_throttles(self):
        return [ScopedRateThrottle()] if self.action == "create" else []

    def get_queryset(self):
        return super().get_queryset().select_related("project")

    @extend_schema(responses=NewApiTokenSerializer)
    def create(self, request, *args, **kwargs):
        serializer = ApiTokenSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = data.get("project")
        via = token_of(request)
        if project is not None:
            project = get_object_for_user(
                request.user, Project, "project.view", token=via, pk=project.pk
            )
        token, key = services.create_api_token(
            actor=request.user,
            name=data["name"],
            scope=data.get("scope", TokenScope.READ),
            project=project,
            expires_at=data.get("expires_at"),
            via=via,
        )
        token.key = key
        return Response(NewApiTokenSerializer(token).data, status=201)

    def perform_destroy(self, instance):
        services.revoke_api_token(actor=self.request.user, token=instance)


class MeSerializer(serializers.ModelSerializer):
    class Meta:
        model = User
        fields = ["id", "username", "email", "first_name", "last_name", "is_staff"]


class MeView(generics.RetrieveAPIView):
    """The signed-in user (handy to check a token)."""

    serializer_class = MeSerializer
    permission_actions = {"*": "authenticated"}

    def get_object(self):
        return self.request.user


class InvitationSerializer(serializers.ModelSerializer):
    """An invitation as its tenant's admins see it (never its secret: the link goes by
    email only). On create, `days` is how long the link works."""

    tenant = VisibleRelatedField(queryset=Tenant.objects.all())
    project = VisibleRelatedField(queryset=Project.objects.all(), required=False, allow_null=True)
    role = serializers.ChoiceField(choices=invitations.INVITABLE_ROLES, default="member")
    project_role = serializers.CharField(required=False, allow_blank=True, default="")
    # Empty while pending (accepted_by) or once the account is gone.
    invited_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    accepted_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    status = serializers.CharField(read_only=True)
    days = serializers.IntegerField(
        write_only=True, required=False, min_value=1, max_value=invitations.MAX_DAYS
    )

    class Meta:
        model = Invitation
        fields = [
            "id",
            "tenant",
            "email",
            "role",
            "project",
            "project_role",
            "invited_by",
            "created_at",
            "expires_at",
            "accepted_at",
            "accepted_by",
            "revoked_at",
            "status",
            "days",
        ]
        read_only_fields = ["id", "created_at", "expires_at", "accepted_at", "revoked_at"]


class InvitationViewSet(
    RestrictedViewSetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Invitations by email, for automation: only a tenant's owners and admins see or send
    them. DELETE withdraws one (the row is kept for the record)."""

    queryset = Invitation.objects.none()
    serializer_class = InvitationSerializer
    permission_actions = {
        "list": "invitation.view",
        "retrieve": "invitation.view",
        "create": "invitation.manage",
        "destroy": "invitation.manage",
    }

    def get_queryset(self):
        return super().get_queryset().select_related("invited_by", "accepted_by")

    def perform_create(self, serializer):
        data = serializer.validated_data
        tenant = get_object_for_user(
            self.request.user,
            Tenant,
            "invitation.manage",
            token=token_of(self.request),
            pk=data["tenant"].pk,
        )
        serializer.instance = invitations.invite(
            actor=self.request.user,
            tenant=tenant,
            email=data["email"],
            role=data["role"],
            project=data.get("project"),
            project_role=data.get("project_role", ""),
            days=data.get("days"),
            base_url=self.request.build_absolute_uri("/"),
        )

    def perform_destroy(self, instance):
        invitations.revoke_invitation(actor=self.request.user, invitation=instance)
