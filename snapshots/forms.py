"""The code picker that forms starting jobs share (the job form, the sweep form): a ready
snapshot of the project, chosen from earlier uploads or uploaded from a folder on the
page (templates/snapshots/_code_upload.html with snapshots/static/snapshots/code_upload.js)."""

from django import forms

from core.formatting import format_size
from snapshots.models import CodeSnapshot, SnapshotState


def snapshot_label(snapshot: CodeSnapshot) -> str:
    git = f", git {snapshot.short_commit}" if snapshot.git_commit else ""
    dirty = " (dirty)" if snapshot.git_dirty else ""
    when = snapshot.created_at.strftime("%Y-%m-%d %H:%M")
    return (
        f"Code #{snapshot.pk}: {snapshot.file_count} file{'s' if snapshot.file_count != 1 else ''}, "
        f"{format_size(snapshot.size)}{git}{dirty}, {when}"
    )


def code_choices(user, project):
    """The code a user may run in `project`: its ready snapshots that the user can see."""
    return CodeSnapshot.objects.visible_to(user).filter(project=project, state=SnapshotState.READY)


class CodeSnapshotField(forms.ModelChoiceField):
    """A project's code: an earlier upload, or a folder uploaded on the page. Templates that
    render the field show the upload box above it (`upload_template`)."""

    upload_template = "snapshots/_code_upload.html"

    def __init__(self, **kwargs):
        kwargs.setdefault("label", "Code")
        kwargs.setdefault("required", False)
        kwargs.setdefault("empty_label", "None (the command needs nothing uploaded)")
        kwargs.setdefault(
            "help_text",
            "Staged read-only into the job's working directory before the command starts: "
            "upload a folder, or pick an earlier upload.",
        )
        super().__init__(queryset=CodeSnapshot.objects.none(), **kwargs)
        self.project = None

    def offer(self, user, project) -> None:
        """Limit the choices to what `user` may run in `project` (none without both)."""
        self.project = project
        if user is not None and project is not None:
            self.queryset = code_choices(user, project)

    def label_from_instance(self, obj) -> str:
        return snapshot_label(obj)
