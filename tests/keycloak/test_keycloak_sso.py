"""Signing in to Gantry through a real Keycloak, in a real browser (conftest.py starts it).

Keycloak runs the realm of `platform/keycloak/lab-realm.json` as imported; the people
signing in are the example's `ada` (with her temporary password) and users each test
creates through Keycloak's admin REST API, in the example's groups. Gantry is Django's
live server; the browser is Debian's chromium under Playwright.

Playwright's sync API runs an event loop in the test's thread, where Django refuses
synchronous queries, so the database is read in a helper thread (`orm`) while a browser
is open.
"""

from __future__ import annotations

import threading
import uuid

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client
from playwright.sync_api import expect

from accounts import oidc
from accounts import services as account_services
from accounts.models import Membership, TenantRole
from projects import services as project_services
from projects.models import ProjectMember, ProjectRole
from projects.permissions import can, forget_roles
from tests.jobs.test_browser import chromium
from tests.keycloak.conftest import CLIENT_ID, KEYCLOAK_GROUP

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), KEYCLOAK_GROUP]

LAB = "/labs/demo-lab"
PROJECT = f"{LAB}/projects/getting-started"


def orm(fn):
    """Run `fn` in a thread of its own (no event loop there) and return its result."""
    result = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            result["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.fixture
def demo_lab(make_user):
    """The tenant and project the example realm's groups name, made by a local owner."""
    owner = make_user("olivia")
    tenant = account_services.create_tenant(actor=owner, name="Demo Lab", slug="demo-lab")
    project = project_services.create_project(
        actor=owner, tenant=tenant, name="Getting started", slug="getting-started"
    )
    return project


@pytest.fixture
def sso(keycloak, settings, live_server, demo_lab):
    """Gantry configured as the setup guide's step 4 says."""
    settings.OIDC_OP_ISSUER = keycloak.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = keycloak.client_secret
    settings.OIDC_PROVIDER_NAME = "Keycloak"
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "accounts.oidc.GantryOIDCBackend",
    ]
    oidc.forget_provider()
    yield keycloak
    oidc.forget_provider()


@pytest.fixture
def person(sso):
    """A fresh Keycloak user in the example's groups (member of demo-lab, project developer)."""
    username = "u" + uuid.uuid4().hex[:10]
    password = "pw-" + uuid.uuid4().hex
    user_id = sso.create_user(username, password, [f"{LAB}/member", f"{PROJECT}/developer"])
    return {"username": username, "password": password, "id": user_id}


@pytest.fixture
def page(live_server):
    with chromium() as browser:
        context = browser.new_context(base_url=live_server.url)
        context.set_default_timeout(60_000)  # Keycloak's pages on two busy cores
        yield context.new_page()
        context.close()


def start_sign_in(page, sso):
    """Gantry's sign-in page -> "Sign in with Keycloak" -> Keycloak's own login page."""
    page.goto("/accounts/login/?next=/tenants/")
    page.get_by_role("link", name="Sign in with Keycloak").click()
    page.wait_for_url(f"{sso.issuer}/protocol/openid-connect/auth*")


def keycloak_login(page, username, password):
    page.fill("#username", username)
    page.fill("#password", password)
    page.click("#kc-login")


def sign_in(page, sso, live_server, who):
    start_sign_in(page, sso)
    keycloak_login(page, who["username"], who["password"])
    page.wait_for_url(f"{live_server.url}/tenants/")


def gantry_user(username):
    user = get_user_model().objects.get(username=username)
    forget_roles(user)
    return user


def roles(username):
    """(tenant roles, project roles) of a Gantry user, as the database has them."""

    def read():
        user = gantry_user(username)
        return (
            dict(Membership.objects.filter(user=user).values_list("tenant__slug", "role")),
            dict(ProjectMember.objects.filter(user=user).values_list("project__slug", "role")),
        )

    return orm(read)


# --- Sign-in through Keycloak's own login page ---------------------------------------


def test_the_example_user_signs_in_changes_her_temporary_password_and_gets_her_roles(
    sso, page, live_server, demo_lab
):
    # The example's ada, as imported: her password is temporary, so Keycloak asks for a
    # new one first (reset here, since Keycloak outlives each test).
    sso.admin(
        "PUT",
        f"/users/{sso.user_id('ada')}/reset-password",
        json={"type": "password", "value": "change-me", "temporary": True},
    )
    start_sign_in(page, sso)
    assert page.title().startswith("Sign in to")  # Keycloak's page, not Gantry's
    keycloak_login(page, "ada", "change-me")
    page.fill("#password-new", "ada-new-password-1")
    page.fill("#password-confirm", "ada-new-password-1")
    page.click("[type=submit]")
    page.wait_for_url(f"{live_server.url}/tenants/")
    assert "Demo Lab" in page.content()

    def check():
        ada = gantry_user("ada")
        assert (ada.email, ada.first_name, ada.last_name) == ("ada@example.org", "Ada", "Lovelace")
        assert ada.oidc_subject == sso.user_id("ada")
        assert not ada.has_usable_password()
        assert can(ada, "job.submit", demo_lab) and not can(ada, "project.delete", demo_lab)

    orm(check)
    assert roles("ada") == (
        {"demo-lab": TenantRole.MEMBER},
        {"getting-started": ProjectRole.DEVELOPER},
    )


def test_a_wrong_password_is_refused_on_keycloaks_page(sso, page, live_server, person):
    start_sign_in(page, sso)
    keycloak_login(page, person["username"], "not-the-password")
    expect(page.locator("#input-error-username")).to_have_text("Invalid username or password.")
    assert page.url.startswith(sso.url)
    assert not orm(lambda: get_user_model().objects.filter(username=person["username"]).exists())


def test_a_disabled_keycloak_user_cannot_sign_in(sso, page, live_server, person):
    sso.admin("PUT", f"/users/{person['id']}", json={"enabled": False})
    start_sign_in(page, sso)
    keycloak_login(page, person["username"], person["password"])
    expect(page.get_by_text("Account is disabled, contact your administrator.")).to_be_visible()
    assert page.url.startswith(sso.url)
    page.goto("/tenants/")
    assert page.url.startswith(f"{live_server.url}/accounts/login/")
    assert not orm(lambda: get_user_model().objects.filter(username=person["username"]).exists())


# --- Groups -> roles ------------------------------------------------------------------


def test_roles_follow_the_keycloak_groups_at_each_sign_in(sso, page, live_server, person):
    sign_in(page, sso, live_server, person)
    assert roles(person["username"]) == (
        {"demo-lab": TenantRole.MEMBER},
        {"getting-started": ProjectRole.DEVELOPER},
    )

    # A lab administrator takes her out of the project group and makes her a lab admin.
    sso.admin("DELETE", f"/users/{person['id']}/groups/{sso.group_id(PROJECT + '/developer')}")
    sso.admin("PUT", f"/users/{person['id']}/groups/{sso.group_id(LAB + '/admin')}")
    sign_in_again(page, sso, live_server)
    assert roles(person["username"]) == ({"demo-lab": TenantRole.ADMIN}, {})

    # ... and then out of the lab altogether: Demo Lab is gone from her pages.
    for group in (f"{LAB}/member", f"{LAB}/admin"):
        sso.admin("DELETE", f"/users/{person['id']}/groups/{sso.group_id(group)}")
    sign_in_again(page, sso, live_server)
    assert roles(person["username"]) == ({}, {})
    assert "Demo Lab" not in page.content()


def sign_in_again(page, sso, live_server):
    """A new sign-in in the same browser: Keycloak's session answers without its form."""
    page.goto("/accounts/login/?next=/tenants/")
    page.get_by_role("link", name="Sign in with Keycloak").click()
    page.wait_for_url(f"{live_server.url}/tenants/")


# --- Sign-out --------------------------------------------------------------------------


def test_sign_out_ends_the_keycloak_session_too(sso, page, live_server, person):
    sign_in(page, sso, live_server, person)
    page.get_by_role("button", name=person["username"]).click()  # the user menu
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{live_server.url}/accounts/login/")
    sessions = sso.admin("GET", f"/users/{person['id']}/sessions").json()
    assert sessions == []

    # Signing in again shows Keycloak's form: nothing is remembered there.
    start_sign_in(page, sso)
    assert page.locator("#username").is_visible() and page.locator("#password").is_visible()
    page.goto("/tenants/")
    assert page.url.startswith(f"{live_server.url}/accounts/login/")


# --- Keycloak access tokens on Gantry's API ------------------------------------------


def test_the_api_takes_a_keycloak_token_for_gantry_and_refuses_one_for_another_audience(
    sso, page, live_server, person, demo_lab, caplog
):
    sign_in(page, sso, live_server, person)  # links her Keycloak identity, applies her groups

    # The example's gantry-cli client (password grant, Audience mapper -> gantry).
    token = sso.token("gantry-cli", person["username"], person["password"])
    claims = jwt.decode(token, options={"verify_signature": False})
    assert CLIENT_ID in ([claims["aud"]] if isinstance(claims["aud"], str) else claims["aud"])
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert orm(lambda: api.get("/api/v1/me/").json()["username"]) == person["username"]
    slugs = orm(lambda: [p["slug"] for p in api.get("/api/v1/projects/").json()["results"]])
    assert slugs == ["getting-started"]

    # Another tool's client, whose tokens are for another API.
    other = f"other-tool-{uuid.uuid4().hex[:6]}"
    sso.admin(
        "POST",
        "/clients",
        json={
            "clientId": other,
            "publicClient": True,
            "standardFlowEnabled": False,
            "directAccessGrantsEnabled": True,
            "protocolMappers": [
                {
                    "name": "other audience",
                    "protocol": "openid-connect",
                    "protocolMapper": "oidc-audience-mapper",
                    "config": {
                        "included.custom.audience": "other-api",
                        "access.token.claim": "true",
                    },
                }
            ],
        },
    )
    foreign = sso.token(other, person["username"], person["password"])
    assert jwt.decode(foreign, options={"verify_signature": False})["aud"] == "other-api"
    response = orm(lambda: Client(HTTP_AUTHORIZATION=f"Bearer {foreign}").get("/api/v1/me/"))
    assert response.status_code == 401
    assert "audience" in response.json()["detail"]
    assert "refused a bearer token" in caplog.text
