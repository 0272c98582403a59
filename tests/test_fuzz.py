"""Schemathesis against Gantry's own OpenAPI schema, as each canonical user.

Every generated request must get an answer below 500 that matches the schema
(status, content type and body), and no answer may carry another tenant's data.
An `{id}` in a path names a real object of lab-a, so the owner's answers are the
real bodies, logs and downloads, not 404s, and the outsider must get 404 for the
same id. The number of examples is bounded so the suite stays quick; raise
FUZZ_EXAMPLES locally for a deeper run.
"""

import os
import re

import pytest
import schemathesis
from django.urls import Resolver404, resolve
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts import services as account_services
from accounts.models import Membership
from config.wsgi import application

# The properties asserted for every answer. Schemathesis' opinionated checks are left
# out on purpose: "positive data acceptance" counts a 400 for a reference to a project
# that does not exist (or is not yours) as a bug; "ignored auth" counts our real token
# as invalid. Signed-out access is covered by tests/test_access.py.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def keep_db_connection():
    """Call the WSGI app as Django's test client does: without closing the test's connection."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_tokens(keep_db_connection, owner, outsider, tenant, other_tenant, project, other_project):
    tokens = {}
    for user in (owner, outsider):
        _, key = account_services.create_api_token(actor=user, name="fuzz", scope="write")
        tokens[user.username] = key
    return tokens


@pytest.fixture
def fuzz_world(fuzz_tokens, tenant, project, owner, member):
    """model -> pk of one object of every kind in lab-a (tests/test_access.py builds them)."""
    from tests.test_access import _objects

    return {model: obj.pk for model, obj in _objects(tenant, project, owner, member).items()}


def with_real_id(case, world) -> None:
    """Point the case's `{id}` at the world's object of the model its view serves."""
    if "id" not in (case.path_parameters or {}):
        return
    try:
        view = resolve(re.sub(r"\{[^}]+\}", "1", case.operation.path)).func
    except Resolver404:
        return
    queryset = getattr(getattr(view, "cls", None), "queryset", None)
    if queryset is not None and queryset.model in world:
        case.path_parameters["id"] = world[queryset.model]


def tenants_of(username):
    return set(Membership.objects.filter(user__username=username).values_list("tenant_id", flat=True))


def assert_no_foreign_tenant(body, allowed, path):
    """Walk the JSON body: every `tenant` id in it must be one of the caller's tenants."""
    if isinstance(body, dict):
        if isinstance(body.get("tenant"), int):
            assert body["tenant"] in allowed, f"{path} leaked tenant {body['tenant']}: {body}"
        for value in body.values():
            assert_no_foreign_tenant(value, allowed, path)
    elif isinstance(body, list):
        for value in body:
            assert_no_foreign_tenant(value, allowed, path)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_never_fails_and_never_leaks(case, fuzz_tokens, fuzz_world):
    with_real_id(case, fuzz_world)
    for username, key in fuzz_tokens.items():
        response = case.call(headers={"Authorization": f"Bearer {key}"})
        assert response.status_code < 500, f"{case.method} {case.formatted_path} as {username}: {response.status_code} {response.text[:500]}"
        case.validate_response(response, checks=CHECKS)
        if response.status_code < 300 and response.headers.get("Content-Type", "").startswith("application/json"):
            assert_no_foreign_tenant(response.json(), tenants_of(username), case.formatted_path)
