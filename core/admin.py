import contextlib

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import HttpResponseRedirect

from core.models import AuditEvent


def adopt(obj, saved) -> None:
    """Make the admin's unsaved `obj` the row a service saved: the admin goes on with `obj`
    (its inlines, its log entry, the redirect to its page)."""
    for field in obj._meta.concrete_fields:
        setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding = False
    obj._state.db = saved._state.db


class Refused(Exception):
    """A service refused an admin's write (its ValidationError or PermissionDenied)."""


@contextlib.contextmanager
def refusals():
    try:
        yield
    except ValidationError as exc:
        raise Refused(" ".join(exc.messages)) from exc
    except PermissionDenied as exc:
        raise Refused(str(exc) or "You may not do that.") from exc


class ServiceWrites:
    """Writes of an admin or inline go through the app's services (permission check,
    validation, audit event) instead of saving the row: subclasses implement `create(request,
    obj)` (returns the saved row), `update(request, obj, fields)` and `delete(request, obj)`."""

    def create(self, request, obj):
        raise NotImplementedError

    def update(self, request, obj, fields: list[str]) -> None:
        raise NotImplementedError

    def delete(self, request, obj) -> None:
        raise NotImplementedError


class ServiceAdmin(ServiceWrites, admin.ModelAdmin):
    """A ModelAdmin (cluster's quota admin shows the pattern) whose saves and deletes, its
    inlines' included (`ServiceInline`), call services. A service's refusal is shown on the
    page, and the whole change is rolled back: nothing half-saved, no error page."""

    def save_model(self, request, obj, form, change):
        with refusals():
            if change:
                self.update(request, obj, list(form.changed_data))
            else:
                adopt(obj, self.create(request, obj))

    def delete_model(self, request, obj):
        with refusals():
            self.delete(request, obj)

    def get_deleted_objects(self, objs, request):
        # The service deletes and decides who may: rows that go with the object (a
        # project's code snapshots, tokens, deliveries) follow it even where their own
        # admin is read-only. Protected rows still stop the delete.
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    @transaction.atomic
    def delete_queryset(self, request, queryset):
        with refusals():
            for obj in queryset:
                self.delete(request, obj)

    def save_formset(self, request, form, formset, change):
        inline = next(
            (i for i in self.get_inline_instances(request) if i.model is formset.model), None
        )
        if not isinstance(inline, ServiceWrites):
            return super().save_formset(request, form, formset, change)
        formset.save(commit=False)  # sorts the rows into new, changed and deleted
        with refusals():
            for obj in formset.deleted_objects:
                inline.delete(request, obj)
            for obj, fields in formset.changed_objects:
                inline.update(request, obj, list(fields))
            for obj in formset.new_objects:
                adopt(obj, inline.create(request, obj))

    def changeform_view(self, request, *args, **kwargs):
        return self._showing_refusals(request, super().changeform_view, *args, **kwargs)

    def delete_view(self, request, *args, **kwargs):
        return self._showing_refusals(request, super().delete_view, *args, **kwargs)

    def changelist_view(self, request, *args, **kwargs):  # the "delete selected" action
        return self._showing_refusals(request, super().changelist_view, *args, **kwargs)

    def _showing_refusals(self, request, view, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Refused as exc:
            # Raised inside the admin's transaction, which has rolled the whole change back.
            self.message_user(request, f"Nothing was saved: {exc}", level=messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


class ServiceInline(ServiceWrites):
    """An inline of a `ServiceAdmin` whose rows are written through services too."""


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the admin shows but never adds, edits or deletes: what changes them is a
    service, reached through the admin's actions (revoke, withdraw) or not at all."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Read-only: the audit log is append-only."""

    list_display = ["created_at", "actor_name", "action", "object_repr", "tenant", "ip_address"]
    list_filter = ["action", "tenant"]
    search_fields = ["actor_name", "object_repr", "action"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant"]
