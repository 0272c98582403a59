"""Shared pieces of the DRF API: the matrix-driven permission class, pagination, errors."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, pagination, permissions

from projects.permissions import AUTHENTICATED, MATRIX_VIEW_OF, can


class Pagination(pagination.PageNumberPagination):
    """Page-number pagination that refuses a malformed page size instead of ignoring it."""

    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if not 1 <= size <= self.max_page_size:
            raise exceptions.ValidationError(
                {self.page_size_query_param: f"A whole number from 1 to {self.max_page_size}."}
            )
        return size

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": self.max_page_size}
            elif parameter["name"] == self.page_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
        return parameters


class MatrixPermission(permissions.BasePermission):
    """Reads `permission_actions` (viewset action -> matrix action) from the view.

    Lists and creates are filtered by `visible_to` and checked by the service;
    object actions are checked here: invisible objects never reach this point
    (the queryset is `visible_to`), so a refusal here is a 403.
    """

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        action = self._action(view)
        if action is None:
            raise exceptions.PermissionDenied(
                f"No permission rule for {view.__class__.__name__}.{getattr(view, 'action', '?')}"
            )
        token = request.auth if hasattr(request.auth, "scope") else None
        return not (
            token and token.scope == "read" and request.method not in permissions.SAFE_METHODS
        )

    def has_object_permission(self, request, view, obj):
        action = self._action(view)
        if action == AUTHENTICATED:
            return True  # the queryset already holds only the user's own objects
        token = request.auth if hasattr(request.auth, "scope") else None
        if can(request.user, action, obj, token=token):
            return True
        view_action = MATRIX_VIEW_OF.get(action, action)
        if not can(request.user, view_action, obj, token=token):
            raise Http404
        return False

    @staticmethod
    def _action(view):
        actions = getattr(view, "permission_actions", None)
        if actions is None:
            return None
        return actions.get(getattr(view, "action", None)) or actions.get("*")


@csrf_exempt  # answers every method the same; it changes nothing
def api_not_found(request, *args, **kwargs):
    return JsonResponse({"detail": "No such API endpoint."}, status=404)


def exception_handler(exc, context):
    """Django's own ValidationError and PermissionDenied (raised by services) become 400 and 403."""
    # Imported here: rest_framework.views reads this module's settings while it loads.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "message_dict"):
            exc = exceptions.ValidationError(exc.message_dict)
        else:
            exc = exceptions.ValidationError({"non_field_errors": exc.messages})
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    return drf_exception_handler(exc, context)
