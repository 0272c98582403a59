from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from accounts.models import ApiToken, Membership, Tenant, User


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


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
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]
    list_select_related = ["user", "tenant"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request):
        return False  # tokens are made in Settings, where the secret is shown once
