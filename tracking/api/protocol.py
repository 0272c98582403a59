"""The MLflow REST API's protocol (`/api/2.0/mlflow/…`): authentication, the request
body, errors and page tokens, as MLflow's server answers.

Plain Django views, not DRF: MLflow's client expects MLflow's JSON (proto field names,
errors as `{"error_code", "message"}`), not DRF's. Authentication is Gantry's: a
personal API token (`MLFLOW_TRACKING_TOKEN`, sent as `Authorization: Bearer gty_…`),
a job's tracking token (tracking.jobenv), an SSO access token, or, for reads only, a
browser session (a session cannot POST here: these views take no CSRF token).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from functools import wraps

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf_exceptions

from accounts.authentication import ApiTokenAuthentication, OidcBearerAuthentication
from accounts.models import ApiToken
from tracking import jobenv
from tracking.errors import MlflowError, invalid
from tracking.services.access import Caller

logger = logging.getLogger(__name__)


def caller_for_request(request) -> Caller:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if header:
        if scheme.lower() != "bearer" or not key:
            raise MlflowError(
                "Send a Gantry API token: 'Authorization: Bearer gty_…'.", "UNAUTHENTICATED"
            )
        if key.startswith(jobenv.PREFIX):
            caller = jobenv.caller_for_token(key)
            if caller is None:
                raise MlflowError("Invalid or expired job tracking token.", "UNAUTHENTICATED")
            return caller
        try:
            found = (
                ApiTokenAuthentication().authenticate(request)
                if key.startswith(ApiToken.PREFIX)
                else OidcBearerAuthentication().authenticate(request)
            )
        except drf_exceptions.APIException as exc:
            raise MlflowError(str(exc.detail), "UNAUTHENTICATED") from None
        if found is None:
            raise MlflowError("Unknown token: send a Gantry API token (gty_…).", "UNAUTHENTICATED")
        user, auth = found
        return Caller(user, auth if isinstance(auth, ApiToken) else None)
    if request.method == "GET" and request.user.is_authenticated:
        return Caller(request.user)
    raise MlflowError(
        "Authentication required: set MLFLOW_TRACKING_TOKEN to a Gantry API token.",
        "UNAUTHENTICATED",
    )


def _body(request) -> dict:
    if request.method == "GET":
        data = {}
        for key in request.GET:
            values = request.GET.getlist(key)
            data[key] = (
                values
                if len(values) > 1 or key in ("experiment_ids", "order_by", "run_ids")
                else values[0]
            )
        return data
    try:
        raw = request.body
    except RequestDataTooBig:
        raise invalid("The request body is too large.") from None
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise MlflowError("The request body is not valid JSON.", "BAD_REQUEST") from None
    if not isinstance(data, dict):
        raise MlflowError("The request body must be a JSON object.", "BAD_REQUEST")
    return data


def mlflow_view(*methods):
    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def wrapper(request, **kwargs):
            try:
                if request.method not in methods:
                    raise MlflowError(
                        f"This endpoint takes {', '.join(methods)}, not {request.method}.",
                        "ENDPOINT_NOT_FOUND",
                    )
                caller = caller_for_request(request)
                result = view(request, caller, _body(request), **kwargs)
            except MlflowError as exc:
                return exc.response()
            except Http404:
                return MlflowError(
                    "The resource does not exist.", "RESOURCE_DOES_NOT_EXIST"
                ).response()
            except PermissionDenied as exc:
                return MlflowError(str(exc) or "Permission denied.", "PERMISSION_DENIED").response()
            if isinstance(result, JsonResponse):
                return result
            return JsonResponse(result if result is not None else {})

        return wrapper

    return decorate


def metric_number(value: float, is_nan: bool):
    if is_nan:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def offset_from_token(token) -> int:
    if not token:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(str(token).encode()))["offset"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise invalid(f"Invalid page token '{str(token)[:100]}'.") from None
    if not isinstance(offset, int) or offset < 0:
        raise invalid("Invalid page token.")
    return offset


def next_page(offset: int | None) -> dict:
    if offset is None:
        return {}
    return {
        "next_page_token": base64.urlsafe_b64encode(
            json.dumps({"offset": offset}).encode()
        ).decode()
    }
