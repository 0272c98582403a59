from django.contrib import admin

from core.admin import ReadOnlyAdmin
from snapshots.models import CodeSnapshot


@admin.register(CodeSnapshot)
class CodeSnapshotAdmin(ReadOnlyAdmin):
    """Read-only: a snapshot never changes once uploaded (jobs name it)."""

    list_display = ["id", "project", "state", "file_count", "size", "git_commit", "created_by",
                    "created_at"]  # fmt: skip
    list_filter = ["state"]
    search_fields = ["git_commit", "git_branch", "digest"]
    list_select_related = ["project__tenant", "created_by"]
