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
from accounts.invitations import invite
from accounts.models import ApiToken, Invitation, Membership, Tenant
from jobs.models import Artifact, Job
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from notifications.models import Subscription
from notifications.services import create_subscription
from projects.models import Project, ProjectMember
from projects.permissions import AUTHENTICATED, MATRIX, MATRIX_VIEW_OF, can
from tests.checkpoints.builders import access_objects as checkpoint_objects
from tests.datasets.builders import access_objects as dataset_objects
from tests.endpoints.builders import access_objects as endpoint_objects
from tests.modelhub.builders import access_objects
from tests.sweeps.builders import access_objects as sweep_objects
from tests.tracking.builders import access_objects as tracking_objects

ROLES = ["owner", "member", "outsider"]
# Views anyone may reach, signed in or not.
PUBLIC = {"login", "logout", "api-schema", "api-docs", "healthz"}
# Single sign-on's own steps (tests/accounts/test_oidc.py drives them against a real provider).
PUBLIC |= {"oidc_authentication_init", "oidc_authentication_callback", "oidc_logout"}
# An invitation's emailed link: its secret is the credential (tests/accounts/test_invitations.py).
PUBLIC |= {"accounts:invitation_accept"}
# The link mailed to an address someone subscribed: its signature is the credential, the
# address's owner may have no account (tests/notifications/test_email.py).
PUBLIC |= {"notifications:subscription_confirm"}
# Pages that only answer 200 with something running behind them: the walk checks that
# signed-out users are sent to log in and outsiders get 404; the named test file covers
# the allowed side against the real thing.
COVERED_ELSEWHERE = {
    "notebook_open": "tests/interactive/test_notebook_origin.py",
    "tensorboard_open": "tests/interactive/test_tensorboard.py",
}
SKIP_NAMESPACES = {"admin"}


def _walk(patterns, prefix="", namespace=None):
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = p.namespace or namespace
            # The API (and MLflow's /ajax-api/ alias of it) answers by the matrix in its own tests;
            # the endpoints' gateway (serve/) in tests/endpoints/test_serving.py, with real models.
            if ns in SKIP_NAMESPACES or str(p.pattern).startswith(("api/", "ajax-api/", "serve/")):
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
    invitation = invite(actor=owner, tenant=tenant, email="invitee@example.org")
    job = submit_job(owner, project, name="ci", command="python -c pass")
    artifact = _artifact(job)
    # Nothing listens on port 9: a test message from the page is refused at once.
    subscription, _ = create_subscription(
        owner, project=project, name="ci", channel="webhook", url="http://127.0.0.1:9/h",
        events=["job.failed"],
    )
    from snapshots.models import CodeSnapshot
    from tests.snapshots.builders import make_snapshot

    return {
        CodeSnapshot: make_snapshot(owner, project, {"train.py": b"print(1)\n"}),
        Subscription: subscription,
        Tenant: tenant,
        Project: project,
        Membership: Membership.objects.get(tenant=tenant, user=member),
        ProjectMember: ProjectMember.objects.get(project=project, user=owner),
        ApiToken: token,
        Invitation: invitation,
        Job: job,
        Artifact: artifact,
        **access_objects(tenant, project, owner),
        **dataset_objects(tenant, project, owner),
        **checkpoint_objects(owner, project),
        **sweep_objects(tenant, project, owner),
        **tracking_objects(project, owner),
        **endpoint_objects(project, owner),
    }


def _artifact(job):
    import hashlib
    import io

    data = b"weights"
    artifact, _ = store_artifact(
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
    expected = _expected(world["users"][role], pattern.callback.permission_action, obj, None)
    if expected != 200:
        assert response.status_code == expected, f"{role} GET {url}: {response.status_code}"
    else:  # 404 while nothing runs behind it
        assert response.status_code in (200, 302, 404), f"{role} GET {url}: {response.status_code}"


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


# --- Rows: what every list returns, for every role and every kind of token ---------------
#
# A list answers 200 to everyone; what matters is which rows. The expected rows are
# computed object by object from the matrix (`can`, with the token), independently of
# the querysets the views build, so a list that forgets the user's access or the
# token's project or scope fails here.

TOKEN_KINDS = ["session", "full", "read-only", "project"]


def _api_lists():
    """(path, viewset) of every API list: a GET without an id whose view has a list action."""
    lists = []
    for path, method in API_OPERATIONS:
        if method != "get" or "{" in path:
            continue
        func, _ = _api_view(path)
        if getattr(func, "actions", {}).get("get") == "list":
            lists.append((path, func.cls))
    return lists


API_LISTS = _api_lists()


def _html_lists():
    from core.views import ObjectListView

    return [
        (name, p.callback.view_class)
        for name, p in PAGES
        if isinstance(getattr(p.callback, "view_class", None), type)
        and issubclass(p.callback.view_class, ObjectListView)
    ]


HTML_LISTS = _html_lists()


def _project_objects(actor, project):
    """One row of every project-level model in `project`."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from modelhub import services as hub_services
    from tests.modelhub.builders import safetensors_bytes

    job = submit_job(actor, project, name=f"job-{project.slug}", command="python -c pass")
    _artifact(job)
    dataset_objects(project.tenant, project, actor)
    model = hub_services.create_model(actor, project, name=f"model-{project.slug}")
    hub_services.upload_version(
        actor, model, [("model.safetensors", SimpleUploadedFile("m", safetensors_bytes()))]
    )


@pytest.fixture
def rows_world(tenant, project, owner, member, outsider, other_tenant, other_project):
    """lab-a: "vision" (tenant-visible: the member views it) and "audio" (private: the
    owner's alone); lab-b: the outsider's "speech", where the member is a member too (so
    a token limited to vision must narrow the member's tenant-level lists to lab-a).
    Every model has rows in each project, and every user a token of each kind (the
    project token on a project they can see)."""
    from images import services as image_services
    from images.models import RuntimeImage
    from projects import services as project_services
    from tests.modelhub.builders import access_objects as hub_objects

    account_services.TENANT_MEMBERS.add(actor=outsider, place=other_tenant, user=member, role="member")
    image_services.seed_catalog()  # public images: every token reads them
    assert RuntimeImage.objects.filter(tenant=None).exists()

    audio = project_services.create_project(
        actor=owner, tenant=tenant, name="Audio", slug="audio", visibility="private"
    )
    hub_objects(tenant, project, owner)  # the tenant's image and build, a model in vision
    hub_objects(other_tenant, other_project, outsider)
    invite(actor=owner, tenant=tenant, email="to-lab-a@example.org")  # admins' rows only
    invite(actor=outsider, tenant=other_tenant, email="to-lab-b@example.org")
    for actor, where in ((owner, project), (owner, audio), (outsider, other_project)):
        _project_objects(actor, where)
    users = {"owner": owner, "member": member, "outsider": outsider}
    limited_to = {"owner": project, "member": project, "outsider": other_project}
    tokens = {}
    for role, user in users.items():
        for kind, extra in {
            "full": {"scope": "write"},
            "read-only": {"scope": "read"},
            "project": {"scope": "write", "project": limited_to[role]},
        }.items():
            token, key = account_services.create_api_token(actor=user, name=kind, **extra)
            tokens[role, kind] = (token, key)
    return {"users": users, "tokens": tokens, "audio": audio}


def _expected_rows(model, action, user, token):
    if action == AUTHENTICATED:
        rows = model.objects.filter(user=user)  # the user's own rows (API tokens)
        if token is not None and token.project_id is not None:
            rows = rows.filter(project_id=token.project_id)
        return set(rows.values_list("pk", flat=True))
    return {obj.pk for obj in model.objects.all() if can(user, action, obj, token=token)}


def _api_rows(api, path):
    ids, url = [], f"{path}?page_size=500"
    while url:
        response = api.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        body = response.json()
        rows = body["results"] if isinstance(body, dict) else body
        ids += [row["id"] for row in rows]
        url = body.get("next") if isinstance(body, dict) else None
    assert len(ids) == len(set(ids)), f"{path} lists a row twice: {ids}"
    return set(ids)


def test_every_api_list_and_html_list_is_covered_by_the_rows_test():
    from core.api import RestrictedViewSetMixin

    assert len(API_LISTS) >= 14 and len(HTML_LISTS) >= 7
    for path, _ in API_OPERATIONS:
        cls = _api_view(path)[0].cls
        if getattr(cls, "queryset", None) is not None:  # every viewset over a model
            assert issubclass(cls, RestrictedViewSetMixin), (
                f"{cls.__name__} ({path}) must start from core.api.RestrictedViewSetMixin"
            )


@pytest.mark.django_db
@pytest.mark.parametrize("kind", TOKEN_KINDS)
@pytest.mark.parametrize("role", ROLES)
def test_every_api_list_returns_exactly_the_rows_the_matrix_and_token_allow(role, kind, rows_world):
    from rest_framework.test import APIClient

    user = rows_world["users"][role]
    api = APIClient()
    token = None
    if kind == "session":
        api.force_authenticate(user)
    else:
        token, key = rows_world["tokens"][role, kind]
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    failures = []
    for path, cls in API_LISTS:
        model = cls.queryset.model
        actions = cls.permission_actions
        expected = _expected_rows(model, actions.get("list") or actions["*"], user, token)
        got = _api_rows(api, path)
        if got != expected:
            failures.append(f"{path}: extra {sorted(got - expected)}, missing {sorted(expected - got)}")
    assert not failures, f"{role} with {kind}:\n" + "\n".join(failures)


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
def test_the_token_narrows_every_list_to_its_project(role, rows_world):
    """The rows test above could pass with lists that hold nothing: these lists must
    hold rows of the project token's project, and none of another project."""
    from rest_framework.test import APIClient

    user = rows_world["users"][role]
    token, key = rows_world["tokens"][role, "project"]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    for path in ("/api/v1/jobs/", "/api/v1/datasets/", "/api/v1/models/", "/api/v1/projects/",
                 "/api/v1/project-members/", "/api/v1/artifacts/", "/api/v1/dataset-files/"):
        body = api.get(path).json()
        assert body["results"], f"{role}: {path} is empty with a token of {token.project}"
        for row in body["results"]:
            project = row.get("project", row["id"] if path == "/api/v1/projects/" else None)
            if project is not None:
                assert project == token.project_id, f"{role}: {path} shows {row}"
    session = APIClient()
    session.force_authenticate(user)
    if role == "owner":  # the owner's session reaches audio; the vision token does not
        audio = rows_world["audio"].pk
        assert audio in {row["project"] for row in session.get("/api/v1/jobs/").json()["results"]}
        assert audio not in {row["project"] for row in api.get("/api/v1/jobs/").json()["results"]}


def _html_rows(response):
    rows = set()
    for obj in response.context["page"].object_list:
        rows.add(obj["pk"] if isinstance(obj, dict) else obj.pk)
    return rows


def _expected_html_rows(view_class, user):
    from core.models import AuditEvent

    model, action = view_class.model, view_class.permission_action
    if model is AuditEvent:
        admin_of = Membership.objects.filter(user=user, role__in=["owner", "admin"]).values("tenant_id")
        return set(AuditEvent.objects.filter(tenant_id__in=admin_of).values_list("pk", flat=True))
    return _expected_rows(model, action, user, None)


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
def test_every_html_list_shows_exactly_the_rows_the_matrix_allows(role, rows_world, client):
    user = rows_world["users"][role]
    client.force_login(user)
    failures = []
    for name, view_class in HTML_LISTS:
        response = client.get(reverse(name), {"page": 1})
        assert response.status_code == 200, name
        expected = _expected_html_rows(view_class, user)
        # A page holds at most paginate_by rows: the test world is smaller than a page.
        assert len(expected) <= view_class.paginate_by, name
        got = _html_rows(response)
        if got != expected:
            failures.append(f"{name}: extra {sorted(got - expected)}, missing {sorted(expected - got)}")
    assert not failures, f"{role}:\n" + "\n".join(failures)
