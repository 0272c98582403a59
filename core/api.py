"""Shared pieces of the DRF API: the matrix-driven permission class, pagination, errors,
and the related-id field every write serializer uses."""

from django.core import exceptions as request_errors
from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, pagination, permissions, serializers

from core.access import AUTHENTICATED, can, restrict, token_of, view_action_of
from core.filters import MAX_ID


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


class FilterBackend(DjangoFilterBackend):
    """django-filter's backend, which leaves a list alone when its query names no filter.

    Building the filter form deep-copies every field and its choices (a third of a
    millisecond per choice filter), and with no filter given it changes nothing:
    every filter skips an empty value. A parameter that starts with a filter's name
    still goes through the form (a range filter reads `name_min`, say), and so does a
    filter set with a required filter, so nothing that would filter, or be refused as
    invalid, is skipped.
    """

    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is not None and not any(
            param.startswith(name)
            for param in request.query_params
            for name in filterset_class.base_filters
        ):
            filters = filterset_class.base_filters.values()
            if not any(f.extra.get("required") for f in filters):
                return queryset
        return super().filter_queryset(request, queryset, view)


class VisibleRelatedField(serializers.PrimaryKeyRelatedField):
    """A related id looked up among the rows the requesting user may see (`visible_to`).

    Another tenant's id then answers exactly like one that does not exist (the same
    400, the same message), so ids cannot be probed for existence. Whether the user
    may act on a visible row is still the view's `get_object_for_user` check (403).
    The serializer needs the request in its context; without one it refuses to guess.
    """

    def get_queryset(self):
        request = self.context.get("request")
        if request is None:
            raise ImproperlyConfigured(
                f"{type(self.parent).__name__}.{self.field_name} needs the request in the "
                "serializer context (context={'request': request})."
            )
        return super().get_queryset().visible_to(request.user)

    def to_internal_value(self, data):
        # int() reads 1.5 as 1 (and True as 1): an id is a whole number.
        if isinstance(data, bool) or (isinstance(data, float) and not data.is_integer()):
            self.fail("incorrect_type", data_type=type(data).__name__)
        return super().to_internal_value(data)


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
        method = request.method.lower()
        action_map = getattr(view, "action_map", None)
        if method not in view.http_method_names or (
            action is None and action_map is not None and method not in action_map
        ):
            # A method the route does not take (POST to a GET-only download, PUT where
            # only PATCH is offered): 405, as Django would answer, not a missing rule.
            raise exceptions.MethodNotAllowed(request.method)
        if action is None:
            raise exceptions.PermissionDenied(
                f"No permission rule for {view.__class__.__name__}.{getattr(view, 'action', '?')}"
            )
        token = token_of(request)
        return not (
            token and token.scope == "read" and request.method not in permissions.SAFE_METHODS
        )

    def has_object_permission(self, request, view, obj):
        action = self._action(view)
        if action == AUTHENTICATED:
            return True  # the queryset already holds only the user's own objects
        token = token_of(request)
        if can(request.user, action, obj, token=token):
            return True
        if not can(request.user, view_action_of(action), obj, token=token):
            raise Http404
        return False

    @staticmethod
    def _action(view):
        actions = getattr(view, "permission_actions", None)
        if actions is None:
            return None
        return actions.get(getattr(view, "action", None)) or actions.get("*")


class RestrictedViewSetMixin:
    """Every API viewset's rows: `restrict(user, action, token)` of its model, so a list and
    an object lookup reach the same rows, narrowed by the user's access and by the
    request's API token (its project and scope). Subclasses refine `get_queryset` from
    `super()` (joins, filters); they never start from the model's manager.

    `scope_field` is the lookup from a row to its project (or tenant, for tenant-scoped
    actions) where it is not `project` / `tenant` (see `restrict`); `public_rows`, rows
    any signed-in user may read whatever their token (the public image catalog).
    The queryset is restricted by the view action of the request's action (a change
    reaches the rows the user can see; MatrixPermission then answers 403 or lets it
    through), so what a token cannot see answers 404, as for the user.
    """

    scope_field: str | None = None
    public_rows = None

    def get_queryset(self):
        model = self.queryset.model
        request = getattr(self, "request", None)
        action = MatrixPermission._action(self)
        if request is None or action is None:
            return model.objects.none()  # the schema generator; a refused request
        if action != AUTHENTICATED:
            action = view_action_of(action)
        rows = restrict(
            model.objects.all(), request.user, action, token_of(request), field=self.scope_field
        )
        if self.public_rows is not None and token_of(request) is not None:
            rows = rows | model.objects.visible_to(request.user).filter(self.public_rows)
        return rows


@csrf_exempt  # answers every method the same; it changes nothing
def api_not_found(request, *args, **kwargs):
    return JsonResponse({"detail": "No such API endpoint."}, status=404)


class RequestTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "The request body is larger than this server accepts."
    default_code = "too_large"


# A stored file's bytes, as the download endpoints answer them: typed by the file's name.
FILE_DOWNLOAD = {
    (200, "*/*"): OpenApiResponse(
        OpenApiTypes.BINARY,
        description="The file, as an attachment. Content-Type is the file's type guessed "
        "from its name (text/plain for .txt, application/json for .json, ...), else "
        "application/octet-stream.",
    )
}


WHOLE_NUMBER = {"type": "integer", "minimum": 0}


def id_filter(name: str, description: str):
    """Document a list's `?<name>=<id>` narrowing (read with `int_param`)."""
    return extend_schema_view(
        list=extend_schema(
            parameters=[OpenApiParameter(name, WHOLE_NUMBER, description=description)]
        )
    )


def int_param(request, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    """A whole-number query parameter (absent or empty: `default`). Anything else, such as
    `?version=null`, is a 400 naming the parameter rather than a filter quietly dropped."""
    raw = request.query_params.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not minimum <= value <= MAX_ID:
        raise exceptions.ValidationError(
            {name: [f"A whole number from {minimum}, not “{raw[:40]}”."]}
        )
    return value


def exception_handler(exc, context):
    """Django's own ValidationError and PermissionDenied (raised by services) become 400 and
    403; every 400 is an object (a bare list of messages goes under `non_field_errors`); a
    body Django refuses to read (too large, too many fields) a 413 or 400 in JSON,
    not Django's HTML error page."""
    # Imported here: rest_framework.views reads this module's settings while it loads.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, request_errors.RequestDataTooBig):
        exc = RequestTooLarge()
    elif isinstance(exc, request_errors.TooManyFieldsSent | request_errors.TooManyFilesSent):
        exc = exceptions.ParseError(str(exc))
    elif isinstance(exc, DjangoValidationError):
        if hasattr(exc, "message_dict"):
            exc = exceptions.ValidationError(exc.message_dict)
        else:
            exc = exceptions.ValidationError({"non_field_errors": exc.messages})
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, exceptions.ValidationError) and not isinstance(exc.detail, dict):
        # A message not tied to one field: the same object shape as every other error.
        exc = exceptions.ValidationError({"non_field_errors": exc.detail})
    return drf_exception_handler(exc, context)
