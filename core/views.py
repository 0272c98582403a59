"""Base classes for Gantry's server-rendered views.

Every view declares `permission_action` (a key of the permission matrix); the
generated access tests fail for a view that does not. Object views look the
object up through `get_object_for_user`, so outsiders get 404 and visible
objects the user may not change get 403.
"""

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views import View

from core.access import AUTHENTICATED, get_object_for_user, restrict
from core.filters import AuditEventFilterSet
from core.models import AuditEvent


def apply_service_errors(form, error: ValidationError) -> None:
    """Show a service's ValidationError on the form's fields (or at the top)."""
    if hasattr(error, "error_dict"):
        for field, errors in error.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, error.messages)


class GantryView(LoginRequiredMixin, View):
    permission_action: str = ""
    model = None

    def get_object(self):
        return get_object_for_user(
            self.request.user, self.model, self.permission_action, pk=self.kwargs["pk"]
        )


class ObjectListView(GantryView):
    """A list filtered by a FilterSet (shared with the API), paginated, HTMX-aware."""

    template_name = ""
    partial_template_name = ""
    filterset_class = None
    paginate_by = 50
    paginator_class = Paginator

    def get_queryset(self):
        # The API's lists start from the same `restrict`; a browser session has no token.
        return restrict(self.model.objects.all(), self.request.user, self.permission_action)

    def get_extra_context(self):
        return {}

    def present(self, objects):
        """What the template's rows read (`rows`): the page's objects, or lighter stand-ins."""
        return objects

    def get(self, request, *args, **kwargs):
        queryset = self.get_queryset()
        filterset = self.filterset_class(request.GET, queryset=queryset, request=request)
        page = self.paginator_class(filterset.qs, self.paginate_by).get_page(request.GET.get("page"))
        context = {
            "filterset": filterset,
            "page": page,
            "objects": page.object_list,
            "rows": self.present(page.object_list),
            **self.get_extra_context(),
        }
        template = (
            self.partial_template_name
            if request.htmx and self.partial_template_name
            else self.template_name
        )
        return render(request, template, context)


class ObjectDetailView(GantryView):
    template_name = ""

    def get_extra_context(self, obj):
        return {}

    def get(self, request, *args, **kwargs):
        obj = self.get_object()
        return render(request, self.template_name, {"object": obj, **self.get_extra_context(obj)})


class ServiceFormView(GantryView):
    """A form whose valid data is handed to a service function.

    Subclasses implement `get_target()` (the object the permission is checked on),
    `get_form_kwargs()` and `perform(form, target)` which calls the service and
    returns the object to redirect to.
    """

    form_class = None
    template_name = "core/form.html"
    title = ""
    submit_label = "Save"
    success_message = ""

    def get_target(self):
        return self.get_object()

    def get_form_kwargs(self, target):
        return {}

    def perform(self, form, target):
        raise NotImplementedError

    def get_success_url(self, result):
        return result.get_absolute_url()

    def get_context(self, form, target):
        return {
            "form": form,
            "object": target,
            "title": self.title,
            "submit_label": self.submit_label,
        }

    def get(self, request, *args, **kwargs):
        target = self.get_target()
        form = self.form_class(**self.get_form_kwargs(target))
        return render(request, self.template_name, self.get_context(form, target))

    def post(self, request, *args, **kwargs):
        target = self.get_target()
        form = self.form_class(data=request.POST, **self.get_form_kwargs(target))
        if form.is_valid():
            try:
                with transaction.atomic():
                    result = self.perform(form, target)
            except ValidationError as exc:
                apply_service_errors(form, exc)
            else:
                if self.success_message:
                    messages.success(request, self.success_message.format(object=result))
                return redirect(self.get_success_url(result))
        return render(request, self.template_name, self.get_context(form, target), status=400)


class ObjectDeleteView(GantryView):
    """Asks for confirmation, listing what will go with the object, then calls the service."""

    template_name = "core/confirm_delete.html"

    def get_contents(self, obj) -> list[tuple[str, int]]:
        return []

    def perform(self, obj):
        raise NotImplementedError

    def get_success_url(self, obj):
        raise NotImplementedError

    def get(self, request, *args, **kwargs):
        obj = self.get_object()
        contents = [(label, n) for label, n in self.get_contents(obj) if n]
        return render(request, self.template_name, {"object": obj, "contents": contents})

    def post(self, request, *args, **kwargs):
        obj = self.get_object()
        contents = [(label, n) for label, n in self.get_contents(obj) if n]
        if contents and request.POST.get("confirm") != obj_confirm_word(obj):
            messages.error(request, f"Type “{obj_confirm_word(obj)}” to confirm.")
            return render(
                request, self.template_name, {"object": obj, "contents": contents}, status=400
            )
        url = self.get_success_url(obj)
        label = str(obj)
        try:
            self.perform(obj)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect(obj.get_absolute_url())
        messages.success(request, f"Deleted {label}.")
        return redirect(url)


def obj_confirm_word(obj) -> str:
    return getattr(obj, "slug", None) or str(obj)


class AuditEventListView(ObjectListView):
    """The audit log: tenant owners and admins see their tenants' events, lab administrators all."""

    model = AuditEvent
    permission_action = AUTHENTICATED
    filterset_class = AuditEventFilterSet
    template_name = "core/audit_list.html"
    paginate_by = 100

    def get_queryset(self):
        return super().get_queryset().select_related("tenant")


def healthz(request):
    """Liveness: the process answers. No database, no session: also the load tests' ceiling."""
    return JsonResponse({"status": "ok"})
