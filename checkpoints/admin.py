from django.contrib import admin

from checkpoints.models import Checkpoint, CheckpointFile, ResumeSource, RetentionPolicy


class CheckpointFileInline(admin.TabularInline):
    model = CheckpointFile
    extra = 0
    readonly_fields = ("path", "size", "sha256", "blob")
    can_delete = False


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("name", "job", "attempt", "step", "state", "total_size", "on_preemption", "completed_at")
    list_filter = ("state", "on_preemption")
    search_fields = ("name", "job__name")
    raw_id_fields = ("job",)
    readonly_fields = ("state", "total_size", "completed_at", "on_preemption")
    inlines = [CheckpointFileInline]


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    list_display = ("project", "keep_last", "keep_best", "metric", "higher_is_better")
    raw_id_fields = ("project",)


@admin.register(ResumeSource)
class ResumeSourceAdmin(admin.ModelAdmin):
    list_display = ("job", "checkpoint")
    raw_id_fields = ("job", "checkpoint")
