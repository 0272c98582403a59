"""Generated access tests: every page and every API endpoint, every canonical user.

The URL configuration and the OpenAPI schema are walked at collection time, so a
page or endpoint added later is covered the day it is added. Each view must
declare the permission-matrix action it needs; the expected answer is computed
from the matrix itself (allowed -> 2xx, visible but not allowed -> 403, not
visible -> 404), so a view that checks the wrong thing, or nothing, fails here.

When a new model appears in a URL, add a builder to OBJECTS below.
"""

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from drf_spectacular.generators import SchemaGenerator

from accounts import services as account_services
from accounts.models import ApiToken, Membership, Tenant
from jobs import services as job_services
from jobs.models import Artifact, Job
from projects.models import Project, ProjectMember
from projects.permissions import AUTHENTICATED, MATRIX, MATRIX_VIEW_OF, can
from tests.datasets.builders import access_objects as dataset_objects
from tests.modelhub.builders import access_objects

ROLES = ["owner", "member", "outsider"]
# Views anyone may reach, signed in or not.
PUBLIC = {"login", "logout", "api-schema", "api-docs", "healthz"}
# Single sign-on's own steps (tests/accounts/test_oidc.py drives them against a real provider).
PUBLIC |= {"oidc_authentication_init", "oidc_authentication_callback", "oidc_logout"}
# Pages that only answer 200 with something running behind them: the walk checks that
# signed-out users are sent to log in and outsiders get 404; the named test file covers
# the allowed side against the real thing.
COVERED_ELSEWHERE = {
    "notebook_proxy": "tests/jobs/test_notebook.py",
    "notebook_proxy_root": "tests/jobs/test_notebook.py",
}
SKIP_NAMESPACES = {"admin"}


def _walk(patterns, prefix="", namespace=None):
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = p.namespace or namespace
            if ns in SKIP_NAMESPACES or str(p.pattern).startswith("api/"):
                continue
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            name = f"{namespace}:{p.name}" if namespace else p.name
            yield name, p


PAGES = sorted(
    {
        name: p
        for name, p in _walk(get_resolver().url_patterns)
        if not str(p.pattern).lstrip("^").startswith("api/")
    }.items()
)


def _objects(tenant, project, owner, member):
    """One object of every model a URL can name, all inside lab-a."""
    token, _ = account_services.create_api_token(actor=owner, name="ci")
    job = job_services.submit_job(owner, project, name="ci", command="python -c pass")
    artifact = _artifact(job)
    return {
        Tenant: tenant,
        Project: project,
        Membership: Membership.objects.get(tenant=tenant, user=member),
        ProjectMember: ProjectMember.objects.get(project=project, user=owner),
        ApiToken: token,
        Job: job,
        Artifact: artifact,
        **access_objects(tenant, project, owner),
        **dataset_objects(tenant, project, owner),
    }


def _artifact(job):
    import hashlib
    import io

    data = b"weights"
    artifact, _ = job_services.store_artifact(
        job, 0, "model.txt", io.BytesIO(data), hashlib.sha256(data).hexdigest()
    )
    return artifact


def _expected(user, action, obj, owner):
    if obj is None:
        return 200  # lists and forms without an object: their querysets are visible_to
    if action == AUTHENTICATED:
        return 200 if getattr(obj, "user_id", None) == user.pk else 404
    if can(user, action, obj):
        return 200
    if can(user, MATRIX_VIEW_OF.get(action, action), obj):
        return 403
    return 404


@pytest.fixture
def world(tenant, project, owner, member, outsider, other_project):
    return {
        "objects": _objects(tenant, project, owner, member),
        "users": {"owner": owner, "member": member, "outsider": outsider},
    }


@pytest.mark.parametrize("name,pattern", PAGES, ids=[n for n, _ in PAGES])
def test_every_page_declares_a_permission_rule(name, pattern):
    if name in PUBLIC:
        return
    view = getattr(pattern.callback, "view_class", pattern.callback)
    action = getattr(view, "permission_action", None)
    assert action, f"{name} has no permission_action: every page must name its rule in the matrix"
    assert action == AUTHENTICATED or action in MATRIX, f"{name}: unknown action {action!r}"


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name,pattern", PAGES, ids=[n for n, _ in PAGES])
def test_every_page_answers_by_the_matrix(name, pattern, role, world, client):
    if name in PUBLIC:
        return
    if name in COVERED_ELSEWHERE:
        return _check_covered_elsewhere(name, pattern, role, world, client)
    view_class = pattern.callback.view_class
    user = world["users"][role]
    kwargs = pattern.pattern.converters.keys()
    obj = None
    if kwargs:
        assert set(kwargs) == {"pk"}, (
            f"{name}: the access test knows only <pk> URLs; teach it {set(kwargs)}"
        )
        assert view_class.model in world["objects"], (
            f"{name}: add an object of {view_class.model.__name__} to _objects()"
        )
        obj = world["objects"][view_class.model]
        url = reverse(name, kwargs={"pk": obj.pk})
    else:
        url = reverse(name)

    # Signed out: always sent to the login page.
    anonymous = client.get(url) if "get" in view_class.http_method_names else client.post(url)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous.url

    client.force_login(user)
    expected = _expected(user, view_class.permission_action, obj, world["users"]["owner"])
    if "get" in view_class.http_method_names:
        response = client.get(url)
    else:
        response = client.post(url)
        expected = 302 if expected == 200 else expected
    assert response.status_code == expected, (
        f"{role} GET {url}: {response.status_code}, matrix says {expected}"
    )


def _check_covered_elsewhere(name, pattern, role, world, client):
    from django.apps import apps

    model = apps.get_model(pattern.callback.model_label)
    obj = world["objects"][model]
    kwargs = {"pk": obj.pk, **({"path": "lab"} if "path" in pattern.pattern.converters else {})}
    url = reverse(name, kwargs=kwargs)
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous.url
    client.force_login(world["users"][role])
    response = client.get(url)
    if not can(world["users"][role], pattern.callback.permission_action, obj):
        assert response.status_code == 404, f"{role} GET {url}: {response.status_code}"
    else:
        assert response.status_code in (200, 404), f"{role} GET {url}: {response.status_code}"


# --- API ---------------------------------------------------------------------


def _api_operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    ops = []
    for path, methods in schema["paths"].items():
        for method in methods:
            if method in ("get", "patch", "put", "delete", "post"):
                ops.append((path, method))
    return sorted(ops)


API_OPERATIONS = _api_operations()


def _api_view(path):
    from django.urls import resolve

    probe = re.sub(r"\{[a-z_]+\}", "1", path)
    match = resolve(probe)
    return match.func, match


def test_every_api_action_has_a_permission_rule():
    for path, method in API_OPERATIONS:
        func, _ = _api_view(path)
        cls = func.cls
        actions = getattr(cls, "permission_actions", None)
        assert actions, f"{cls.__name__} has no permission_actions"
        drf_action = getattr(func, "actions", {}).get(method) if hasattr(func, "actions") else None
        if drf_action:
            rule = actions.get(drf_action) or actions.get("*")
            assert rule, (
                f"{cls.__name__}.{drf_action} ({method.upper()} {path}) has no permission rule"
            )
            assert rule == AUTHENTICATED or rule in MATRIX, (
                f"{cls.__name__}.{drf_action}: unknown action {rule!r}"
            )


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    "path,method", API_OPERATIONS, ids=[f"{m.upper()} {p}" for p, m in API_OPERATIONS]
)
def test_every_api_endpoint_answers_by_the_matrix(path, method, role, world, api_for):
    func, _ = _api_view(path)
    user = world["users"][role]
    api = api_for(user)
    actions = func.cls.permission_actions
    drf_action = func.actions[method] if hasattr(func, "actions") else None

    if "{id}" not in path:
        if method != "get":
            return  # creation is covered by each app's own tests (it needs valid data)
        response = api.get(path.replace("{format}", "json"))
        assert response.status_code == 200, response.content
        body = response.json()
        rows = body.get("results", body) if isinstance(body, dict) else body
        if role == "outsider" and isinstance(rows, list):
            lab_a = world["objects"][Tenant].pk
            lab_a_object = world["objects"].get(func.cls.queryset.model)
            for row in rows:
                assert row.get("tenant") != lab_a, f"outsider sees lab-a data at {path}: {row}"
                assert lab_a_object is None or row.get("id") != lab_a_object.pk, (
                    f"outsider sees lab-a data at {path}: {row}"
                )
        return

    model = func.cls.queryset.model
    assert model in world["objects"], f"{path}: add an object of {model.__name__} to _objects()"
    obj = world["objects"][model]
    url = path.replace("{id}", str(obj.pk))
    action = actions.get(drf_action) or actions.get("*")
    expected = _expected(user, action, obj, world["users"]["owner"])
    # A nested sub-resource (e.g. /datasets/{id}/bucket-imports/{import_id}/): none exists,
    # so the allowed answer is a 404 from the lookup inside the object the user may see.
    nested = re.findall(r"\{([a-z_]+)\}", url)
    url = re.sub(r"\{[a-z_]+\}", "999999", url)
    response = getattr(api, method)(url, {}, format="json")
    if expected == 200 and nested:
        assert response.status_code in (400, 404), f"{role} {method.upper()} {url}: {response.status_code}"
    elif expected == 200:
        # An allowed write with an empty body may succeed or be rejected as invalid, never 403/404/5xx.
        allowed = {
            "get": {200},
            "patch": {200, 400},
            "put": {200, 400},
            "delete": {204, 400},
            "post": {200, 201, 400},
        }[method]
        assert response.status_code in allowed, (
            f"{role} {method.upper()} {url}: {response.status_code} {response.content[:300]}"
        )
    else:
        assert response.status_code == expected, (
            f"{role} {method.upper()} {url}: {response.status_code}, matrix says {expected}"
        )


@pytest.mark.django_db
def test_anonymous_api_requests_are_refused(client):
    for path, method in API_OPERATIONS:
        url = re.sub(r"\{[a-z_]+\}", "1", path)
        response = getattr(client, method)(url)
        assert response.status_code in (401, 403), (
            f"{method.upper()} {path} answered {response.status_code} to nobody"
        )
