from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.core.exceptions import ValidationError

from accounts import services
from accounts.invitations import revoke_invitation
from accounts.members import MemberService
from accounts.models import ApiToken, Invitation, Membership, Tenant, User
from core.admin import ReadOnlyAdmin, ServiceAdmin, ServiceInline


class MemberRowForm(forms.ModelForm):
    """A member row of an inline: a saved row's user is fixed (remove and add instead)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and "user" in self.fields:
            self.fields["user"].disabled = True


class MemberWrites:
    """Member rows of any place, added, changed and removed through the kind's
    `accounts.members.MemberService` (`members`)."""

    members: MemberService

    def create(self, request, obj):
        return self.members.add(actor=request.user, place=obj.place, user=obj.user, role=obj.role)

    def update(self, request, obj, fields):
        if "role" in fields:
            self.members.change_role(actor=request.user, member=obj, role=obj.role)

    def delete(self, request, obj):
        self.members.remove(actor=request.user, member=obj)


class MemberInline(MemberWrites, ServiceInline, admin.TabularInline):
    form = MemberRowForm
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["source"]


class MemberAdmin(MemberWrites, ServiceAdmin):
    def get_readonly_fields(self, request, obj=None):
        # A saved row stays the same user's in the same place: remove it and add another.
        return [self.model.place_field, "user", "source"] if obj else ["source"]


class MembershipInline(MemberInline):
    model = Membership
    members = services.TENANT_MEMBERS


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    list_display = [
        "username",
        "email",
        "first_name",
        "last_name",
        "is_staff",
        "is_active",
        "last_login",
    ]


@admin.register(Tenant)
class TenantAdmin(ServiceAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def create(self, request, obj):
        # The administrator names the members (and owners) in the inline below.
        return services.create_tenant(
            actor=request.user,
            name=obj.name,
            slug=obj.slug,
            description=obj.description,
            creator_owns=False,
        )

    def update(self, request, obj, fields):
        services.update_tenant(
            actor=request.user, tenant=obj, **{name: getattr(obj, name) for name in fields}
        )

    def delete(self, request, obj):
        services.delete_tenant(actor=request.user, tenant=obj)


@admin.register(Membership)
class MembershipAdmin(MemberAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]
    list_select_related = ["user", "tenant"]
    members = services.TENANT_MEMBERS


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "user",
        "key_prefix",
        "scope",
        "project",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["scope", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "user__username", "key_prefix"]
    readonly_fields = ["key_prefix", "key_hash", "created_at", "last_used_at", "revoked_at"]
    list_select_related = ["user", "project"]
    raw_id_fields = ["user", "project"]

    # Read-only: tokens are made in Settings, where the secret is shown once, and revoked
    # (the row kept for the record), never edited.
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            services.revoke_api_token(actor=request.user, token=token)
        self.message_user(request, "Revoked. The tokens stop working immediately.")


@admin.register(Invitation)
class InvitationAdmin(ReadOnlyAdmin):
    """Invitations are sent from the tenant page or the API (the link goes by email only);
    here a lab administrator sees them and withdraws them, through the service."""

    list_display = [
        "email",
        "tenant",
        "role",
        "project",
        "project_role",
        "invited_by",
        "created_at",
        "expires_at",
        "accepted_by",
        "revoked_at",
    ]
    list_filter = ["role", "tenant", ("accepted_at", admin.EmptyFieldListFilter)]
    search_fields = ["email", "tenant__name", "invited_by__username"]
    list_select_related = ["tenant", "project", "invited_by", "accepted_by"]
    actions = ["withdraw"]

    @admin.action(description="Withdraw the selected invitations")
    def withdraw(self, request, queryset):
        withdrawn = 0
        for invitation in queryset.filter(accepted_at__isnull=True):
            try:
                revoke_invitation(actor=request.user, invitation=invitation)
            except ValidationError:
                continue
            withdrawn += 1
        self.message_user(request, f"Withdrew {withdrawn} invitation(s); their links stop working.")
