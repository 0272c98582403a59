from django.contrib import admin

from jobs.models import Artifact, Job, JobEvent, JobImage, JobWorker


class JobWorkerInline(admin.TabularInline):
    model = JobWorker
    extra = 0
    exclude = ["notebook_token"]
    readonly_fields = [f.name for f in JobWorker._meta.fields if f.name not in ("notebook_token",)]
    can_delete = False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "from_state", "to_state", "reason", "actor"]
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "project", "kind", "state", "created_by", "created_at"]
    list_filter = ["state", "kind", "backend"]
    search_fields = ["name", "command"]
    list_select_related = ["project__tenant", "created_by"]
    # State changes go through jobs.services; the admin only looks.
    readonly_fields = [f.name for f in Job._meta.fields if f.name != "token_hash"]
    exclude = ["token_hash"]
    inlines = [JobWorkerInline, JobEventInline]


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ["job", "worker", "path", "size", "created_at"]
    readonly_fields = ["job", "worker", "path", "size", "sha256", "file", "created_at"]


@admin.register(JobImage)
class JobImageAdmin(admin.ModelAdmin):
    list_display = ["job", "reference", "digest"]
    search_fields = ["reference", "digest"]
    readonly_fields = ["job", "image", "reference", "digest"]
