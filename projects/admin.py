from django.contrib import admin

from projects.models import Project, ProjectMember


class ProjectMemberInline(admin.TabularInline):
    model = ProjectMember
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "slug", "visibility", "created_by", "created_at"]
    list_filter = ["visibility", "tenant"]
    search_fields = ["name", "slug", "tenant__name"]
    list_select_related = ["tenant", "created_by"]
    autocomplete_fields = ["tenant"]
    raw_id_fields = ["created_by"]
    inlines = [ProjectMemberInline]


@admin.register(ProjectMember)
class ProjectMemberAdmin(admin.ModelAdmin):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "project__name"]
    list_select_related = ["user", "project__tenant"]
    autocomplete_fields = ["user", "project"]
