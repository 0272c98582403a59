from django.contrib import admin

from tracking.models import Experiment, LoggedModel, Param, Run, RunTag


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "is_default", "lifecycle_stage", "created_by"]
    list_filter = ["lifecycle_stage", "is_default"]
    search_fields = ["name", "project__slug", "project__tenant__slug"]
    list_select_related = ["project__tenant", "created_by"]
    readonly_fields = ["creation_time", "last_update_time"]


class ParamInline(admin.TabularInline):
    model = Param
    extra = 0
    readonly_fields = ["key", "value"]
    can_delete = False


class RunTagInline(admin.TabularInline):
    model = RunTag
    extra = 0
    readonly_fields = ["key", "value"]
    can_delete = False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["run_id", "name", "experiment", "status", "lifecycle_stage", "job", "user_id"]
    list_filter = ["status", "lifecycle_stage"]
    search_fields = ["run_id", "name", "user_id"]
    list_select_related = ["experiment__project__tenant", "job"]
    raw_id_fields = ["experiment", "job", "created_by"]
    inlines = [ParamInline, RunTagInline]


@admin.register(LoggedModel)
class LoggedModelAdmin(admin.ModelAdmin):
    list_display = ["model_id", "name", "experiment", "status", "source_run_id"]
    list_filter = ["status"]
    search_fields = ["model_id", "name", "source_run_id"]
    list_select_related = ["experiment__project__tenant"]
    raw_id_fields = ["experiment", "run", "created_by"]
