from django.contrib import admin

from sweeps.models import Sweep, Trial


class TrialInline(admin.TabularInline):
    model = Trial
    fields = ["number", "job", "state", "objective", "params", "reason"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "state", "objective", "sampler", "max_trials", "created_at"]
    list_filter = ["state", "sampler"]
    search_fields = ["name", "project__name"]
    readonly_fields = ["importance", "importance_trials", "state", "state_reason", "finished_at"]
    inlines = [TrialInline]
