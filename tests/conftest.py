"""Canonical users and objects, built through the services as a user would.

- owner:    owns tenant "lab-a" (and so maintains every project in it)
- member:   a plain member of lab-a (viewer of its tenant-visible projects)
- outsider: owns "lab-b" and has nothing to do with lab-a
"""

import os

import pytest
from django.contrib.auth import get_user_model

from accounts import services as account_services
from projects import services as project_services


def pytest_addoption(parser):
    parser.addoption(
        "--big-images",
        action="store_true",
        help="also run the tests marked big_image (`make test-k8s-ddp`; not in `make test`)",
    )


def pytest_collection_modifyitems(config, items):
    """Tests marked `postgres` exercise PostgreSQL itself (a restart, say): on the SQLite
    pass they are deselected, since nothing there could run them. Tests marked
    `big_image` need an image of gigabytes built first (`make test-k8s-ddp` builds it and
    passes --big-images): deselected otherwise, and counted as deselected, not skipped."""
    from django.conf import settings

    def out(item) -> bool:
        if item.get_closest_marker("big_image") and not config.getoption("--big-images"):
            return True
        postgres = "postgresql" in settings.DATABASES["default"]["ENGINE"]
        return item.get_closest_marker("postgres") is not None and not postgres

    deselected = [item for item in items if out(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not out(item)]


# Outside services by the fixture that starts them: each test using one gets the marker
# of the same name, so `make test-fast` can leave them out (`-m "not ceph and ..."`).
SERVICE_FIXTURES = ("ceph", "keycloak", "registry")
_browser_modules: dict[str, bool] = {}


def _drives_a_browser(item) -> bool:
    """Whether the test's module drives Chromium (Playwright), read once per module."""
    path = str(item.path)
    if path not in _browser_modules:
        try:
            _browser_modules[path] = "playwright" in item.path.read_text()
        except OSError:
            _browser_modules[path] = False
    return _browser_modules[path]


def pytest_itemcollected(item):
    """Under pytest-xdist (`make test`: --dist loadgroup) a test runs in any worker, and
    each worker starts the fixtures it needs for itself. Tests sharing a fixture that is
    costly to start run in one worker, which starts it once: a module's (a JupyterLab, a
    trained model) per module, and Ceph (a monitor, an OSD, a gateway) for the session.

    Each test is also marked with the outside services it needs (SERVICE_FIXTURES, and
    `browser` for Chromium), which `make test-fast` deselects."""
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is None:
        return
    for service in SERVICE_FIXTURES:
        if service in fixtures.names_closure:
            item.add_marker(getattr(pytest.mark, service))
    if _drives_a_browser(item):
        item.add_marker(pytest.mark.browser)
    if "ceph" in fixtures.names_closure:
        item.add_marker(pytest.mark.xdist_group("ceph"))
    elif any(
        d.scope in ("module", "class") and d.baseid.startswith("tests")  # ours, not plugins'
        for defs in fixtures.name2fixturedefs.values()
        for d in defs
    ):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def service_required(name: str, reachable: bool):
    """Under CI a missing service is a failure, never a skip."""
    if reachable:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} is not reachable, and CI=true requires it.")
    pytest.skip(f"{name} is not reachable")


@pytest.fixture
def make_user(db):
    def make(username, **extra):
        return get_user_model().objects.create_user(
            username=username, password="pw-" + username, email=f"{username}@example.org", **extra
        )

    return make


@pytest.fixture
def owner(make_user):
    return make_user("olivia")


@pytest.fixture
def member(make_user):
    return make_user("max")


@pytest.fixture
def outsider(make_user):
    return make_user("oscar")


@pytest.fixture
def tenant(owner, member):
    tenant = account_services.create_tenant(actor=owner, name="Lab A", slug="lab-a")
    account_services.TENANT_MEMBERS.add(actor=owner, place=tenant, user=member, role="member")
    return tenant


@pytest.fixture
def other_tenant(outsider):
    return account_services.create_tenant(actor=outsider, name="Lab B", slug="lab-b")


@pytest.fixture
def project(tenant, owner):
    return project_services.create_project(actor=owner, tenant=tenant, name="Vision", slug="vision")


@pytest.fixture
def other_project(other_tenant, outsider):
    return project_services.create_project(
        actor=outsider, tenant=other_tenant, name="Speech", slug="speech"
    )


@pytest.fixture
def client_for(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def api_for():
    from rest_framework.test import APIClient

    def make(user):
        api = APIClient()
        api.force_authenticate(user)
        return api

    return make


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2 is slow on purpose; the tests make many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    # Throttles and login limits count in the cache; one test must not spend another's.
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True, scope="session")
def _private_file_storage(tmp_path_factory):
    """Files written by tests go to a temporary folder, never to the checkout's var/."""
    from django.conf import settings
    from django.test.utils import override_settings

    location = tmp_path_factory.mktemp("files")
    default = settings.STORAGES["default"]
    if default["BACKEND"] != "django.core.files.storage.FileSystemStorage":
        yield
        return
    override = override_settings(
        MEDIA_ROOT=location,
        STORAGES={**settings.STORAGES, "default": {**default, "OPTIONS": {**default.get("OPTIONS", {}), "location": location}}},
    )
    override.enable()
    yield
    override.disable()
