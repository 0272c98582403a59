from django.contrib import admin

from accounts.admin import MemberAdmin, MemberInline
from core.admin import ServiceAdmin
from projects import services
from projects.models import Project, ProjectMember

PROJECT_FIELDS = ["name", "slug", "description", "visibility"]


class ProjectMemberInline(MemberInline):
    model = ProjectMember
    members = services.PROJECT_MEMBERS


@admin.register(Project)
class ProjectAdmin(ServiceAdmin):
    list_display = ["name", "tenant", "slug", "visibility", "created_by", "created_at"]
    list_filter = ["visibility", "tenant"]
    search_fields = ["name", "slug", "tenant__name"]
    list_select_related = ["tenant", "created_by"]
    autocomplete_fields = ["tenant"]
    inlines = [ProjectMemberInline]

    def get_readonly_fields(self, request, obj=None):
        # A project does not move between tenants; its creator is whoever created it.
        return ["tenant", "created_by"] if obj else ["created_by"]

    def create(self, request, obj):
        return services.create_project(
            actor=request.user,
            tenant=obj.tenant,
            **{name: getattr(obj, name) for name in PROJECT_FIELDS},
        )

    def update(self, request, obj, fields):
        services.update_project(
            actor=request.user,
            project=obj,
            **{name: getattr(obj, name) for name in fields if name in PROJECT_FIELDS},
        )

    def delete(self, request, obj):
        services.delete_project(actor=request.user, project=obj)


@admin.register(ProjectMember)
class ProjectMemberAdmin(MemberAdmin):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "project__name"]
    list_select_related = ["user", "project__tenant"]
    autocomplete_fields = ["user", "project"]
    members = services.PROJECT_MEMBERS
