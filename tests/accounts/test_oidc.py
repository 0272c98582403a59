"""Single sign-on against a real OpenID Connect provider, no mock.

`tests/oidc/provider.mjs` (panva's oidc-provider under Node, installed by `.ci/run`
with `npm ci`) runs as its own process on 127.0.0.1, with our own login and
consent pages, a users file the tests rewrite between sign-ins, and a signing key
the tests generate (so they can also mint tokens the provider's key signs, with a
wrong audience, issuer or expiry). Gantry is Django's live server; an httpx client
with a cookie jar plays the browser through the authorization-code flow.
"""

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.test import Client
from jwt.algorithms import RSAAlgorithm
from mozilla_django_oidc.utils import generate_code_challenge

from accounts import oidc
from accounts import services as account_services
from accounts.models import Membership, MembershipSource, TenantRole
from core.models import AuditEvent
from projects.models import ProjectMember, ProjectRole
from projects.permissions import can, forget_roles
from tests.conftest import service_required

pytestmark = [pytest.mark.slow]

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "oidc"
CLIENT_ID = "gantry"
CLIENT_SECRET = "test-client-secret"
API_RESOURCE = "urn:gantry:api"
OTHER_RESOURCE = "urn:other:api"
KID = "gantry-test-key"

ALICE = {
    "password": "alice-password",
    "sub": "3f6c1f8e-alice",
    "email": "alice@lab-a.example.org",
    "given_name": "Alice",
    "family_name": "Liddell",
    "groups": [
        "/labs/lab-a/member",
        "/labs/lab-a/projects/vision/developer",
        "/labs/ghost-lab/owner",  # no such tenant: ignored, logged
        "/labs/lab-a/superhero",  # no such role: ignored, logged
        "/unrelated/group",
    ],
}


# --- The provider --------------------------------------------------------------


def _node_ready() -> bool:
    return bool(shutil.which("node")) and (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir()


@pytest.fixture(scope="session")
def provider_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class RunningProvider:
    def __init__(self, issuer: str, users_path: Path, key):
        self.issuer = issuer
        self.users_path = users_path
        self.key = key

    def set_users(self, users: dict) -> None:
        tmp = self.users_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(users))
        tmp.replace(self.users_path)

    def mint(self, key=None, kid=KID, **claims) -> str:
        """A token signed with the provider's own key (or `key`), with the given claims."""
        now = int(time.time())
        body = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": ALICE["sub"],
            "iat": now,
            "exp": now + 300,
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture(scope="session")
def oidc_provider(live_server, provider_key, tmp_path_factory):
    service_required("node with tests/oidc/node_modules (cd tests/oidc && npm ci)", _node_ready())
    workdir = tmp_path_factory.mktemp("oidc-provider")
    jwk = json.loads(RSAAlgorithm.to_jwk(provider_key))
    jwk.pop("key_ops", None)  # PyJWT writes ["sign"]; the provider also verifies with it
    jwk.update(kid=KID, use="sig", alg="RS256")
    (workdir / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    users_path = workdir / "users.json"
    users_path.write_text(json.dumps({"alice": ALICE}))
    env = {
        **os.environ,
        "OIDC_TEST_USERS": str(users_path),
        "OIDC_TEST_JWKS": str(workdir / "jwks.json"),
        "OIDC_TEST_CLIENT_ID": CLIENT_ID,
        "OIDC_TEST_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_TEST_REDIRECT_URIS": f"{live_server.url}/oidc/callback/",
        "OIDC_TEST_POST_LOGOUT_REDIRECT_URIS": f"{live_server.url}/accounts/login/",
        "OIDC_TEST_RESOURCES": json.dumps({API_RESOURCE: CLIENT_ID, OTHER_RESOURCE: "other-api"}),
    }
    process = subprocess.Popen(
        ["node", "provider.mjs"],
        cwd=PROVIDER_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    issuer = None
    for line in process.stdout:  # ends if the process dies
        if line.startswith("READY "):
            issuer = line.split()[1]
            break
    if issuer is None:
        process.wait(timeout=10)
        pytest.fail(f"the test OpenID provider did not start (exit {process.returncode})")
    # Keep reading its output so a chatty provider never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    yield RunningProvider(issuer, users_path, provider_key)
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def sso(oidc_provider, settings, live_server, db):
    """Gantry configured for the test provider, with lab-a (project vision) and lab-b."""
    settings.OIDC_OP_ISSUER = oidc_provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_PROVIDER_NAME = "Test IdP"
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "accounts.oidc.GantryOIDCBackend",
    ]
    oidc.forget_provider()
    oidc_provider.set_users({"alice": ALICE})
    yield oidc_provider
    oidc.forget_provider()


@pytest.fixture
def browser(live_server):
    with httpx.Client(timeout=30, follow_redirects=False, trust_env=False) as client:
        client.gantry = live_server.url
        yield client


def _follow(client, response, stop=lambda url: False):
    """Follow redirects by hand, so each hop can be checked; stop before a URL if asked."""
    hops = 0
    while response.is_redirect:
        url = urljoin(str(response.url), response.headers["location"])
        if stop(url):
            return url
        hops += 1
        assert hops < 20, "redirect loop"
        response = client.get(url)
    return response


def _form_action(html: str, marker: str) -> str:
    start = html.index(marker)
    action_at = html.rindex('action="', 0, start)
    return html[action_at + len('action="') : html.index('"', action_at + len('action="'))]


def sign_in(
    client, start_url, username="alice", password=ALICE["password"], consent=True, stop=None
):
    """Play the browser: provider login, then consent, until Gantry (or `stop`) answers."""
    response = _follow(client, client.get(start_url), stop or (lambda url: False))
    while isinstance(response, httpx.Response) and "/interaction/" in str(response.url):
        html = response.text
        if 'name="password"' in html:
            response = client.post(
                urljoin(str(response.url), _form_action(html, 'name="username"')),
                data={"username": username, "password": password},
            )
            if response.status_code == 401:
                return response  # the provider's own failure page
        elif "/confirm" in html:
            action = "/confirm" if consent else "/abort"
            response = client.post(urljoin(str(response.url), _form_action(html, action)))
        else:
            pytest.fail(f"unexpected provider page: {html[:500]}")
        response = _follow(client, response, stop or (lambda url: False))
    return response


def gantry_sign_in(browser, **kwargs):
    return sign_in(browser, f"{browser.gantry}/oidc/authenticate/", **kwargs)


def alice():
    user = get_user_model().objects.get(oidc_subject=ALICE["sub"])
    forget_roles(user)
    return user


# --- Sign-in through the real provider ---------------------------------------------


def test_login_page_offers_the_provider_when_configured(sso, client):
    page = client.get("/accounts/login/?next=/tenants/")
    assert "Sign in with Test IdP" in page.content.decode()
    assert "/oidc/authenticate/?next=%2Ftenants%2F" in page.content.decode()


def test_login_page_has_no_sso_button_without_configuration(client, db):
    assert "Sign in with" not in client.get("/accounts/login/").content.decode()


def test_sso_sign_in_creates_the_user_with_roles_from_groups(sso, browser, project, caplog):
    first = browser.get(f"{browser.gantry}/oidc/authenticate/?next=/tenants/")
    query = parse_qs(urlparse(first.headers["location"]).query)
    assert first.headers["location"].startswith(f"{sso.issuer}/auth?")
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"]
    assert query["scope"] == ["openid email profile groups"]

    landing = sign_in(browser, first.headers["location"])
    assert landing.status_code == 200 and str(landing.url) == f"{browser.gantry}/tenants/"
    assert "Lab A" in landing.text

    user = alice()
    assert (user.username, user.email, user.first_name) == ("alice", ALICE["email"], "Alice")
    assert not user.has_usable_password()
    membership = Membership.objects.get(user=user)
    assert (membership.tenant.slug, membership.role, membership.source) == (
        "lab-a",
        "member",
        "oidc",
    )
    project_member = ProjectMember.objects.get(user=user)
    assert (project_member.project, project_member.role) == (project, ProjectRole.DEVELOPER)
    assert can(user, "job.submit", project) and not can(user, "project.delete", project)
    assert "unknown tenant 'ghost-lab'" in caplog.text
    assert "unknown tenant role 'superhero'" in caplog.text
    actions = set(
        AuditEvent.objects.filter(details__source="oidc").values_list("action", flat=True)
    )
    assert {"user.create", "membership.add", "projectmember.add"} <= actions
    assert AuditEvent.objects.filter(action="auth.login", actor=user).exists()


def test_wrong_password_is_refused_by_the_provider_and_signs_in_no_one(sso, browser, tenant):
    failure = gantry_sign_in(browser, password="not-her-password")
    assert failure.status_code == 401 and "Invalid username or password." in failure.text
    assert not get_user_model().objects.filter(username="alice").exists()
    home = browser.get(f"{browser.gantry}/")
    assert home.status_code == 302 and "/accounts/login/" in home.headers["location"]


def test_denied_consent_shows_a_clear_failure_page(sso, browser, tenant):
    page = gantry_sign_in(browser, consent=False)
    assert page.status_code == 403
    assert "Test IdP refused the sign-in" in page.text and "denied access" in page.text
    assert AuditEvent.objects.filter(action="auth.login_failed", details__method="oidc").exists()


def test_group_changes_apply_at_the_next_sign_in(sso, browser, project):
    gantry_sign_in(browser)
    assert Membership.objects.get(user=alice()).role == TenantRole.MEMBER

    sso.set_users({"alice": {**ALICE, "groups": ["/labs/lab-a/admin"]}})
    gantry_sign_in(browser)
    assert Membership.objects.get(user=alice()).role == TenantRole.ADMIN
    assert not ProjectMember.objects.filter(user=alice()).exists()
    assert AuditEvent.objects.filter(
        action="membership.change", details__old="member", details__new="admin"
    ).exists()


def test_removed_group_removes_access_but_never_local_memberships(
    sso, browser, project, other_tenant, outsider
):
    gantry_sign_in(browser)
    # A role granted by hand in Gantry is not the provider's to take away.
    account_services.TENANT_MEMBERS.add(actor=outsider, place=other_tenant, user=alice(), role="member")
    token, key = account_services.create_api_token(actor=alice(), name="ci")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get(f"/api/v1/projects/{project.pk}/").status_code == 200

    sso.set_users({"alice": {**ALICE, "groups": []}})
    gantry_sign_in(browser)
    assert list(Membership.objects.filter(user=alice()).values_list("tenant__slug", "source")) == [
        ("lab-b", MembershipSource.LOCAL)
    ]
    assert not ProjectMember.objects.filter(user=alice()).exists()
    # The token is checked against current roles: lab-a is gone from it at once.
    assert api.get(f"/api/v1/projects/{project.pk}/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None  # she still belongs to lab-b


def test_losing_every_group_revokes_api_tokens(sso, browser, project):
    gantry_sign_in(browser)
    token, key = account_services.create_api_token(actor=alice(), name="ci")
    sso.set_users({"alice": {**ALICE, "groups": []}})
    gantry_sign_in(browser)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", object_id=str(token.pk)).exists()
    response = Client(HTTP_AUTHORIZATION=f"Bearer {key}").get("/api/v1/me/")
    assert response.status_code == 401


def test_sso_never_takes_over_a_local_account(sso, browser, make_user, tenant):
    make_user("alice")  # a local account with a password
    page = gantry_sign_in(browser)
    assert page.status_code == 403
    assert "already exists and is not linked" in page.text
    assert get_user_model().objects.get(username="alice").oidc_subject is None


def test_sign_out_also_signs_out_of_the_provider(sso, browser, tenant):
    gantry_sign_in(browser)
    csrf = next(c.value for c in browser.cookies.jar if c.name == "csrftoken")
    response = browser.post(
        f"{browser.gantry}/accounts/logout/",
        headers={"X-CSRFToken": csrf, "Referer": browser.gantry},
    )
    assert response.status_code == 302
    end_session = response.headers["location"]
    assert end_session.startswith(f"{sso.issuer}/session/end?")
    query = parse_qs(urlparse(end_session).query)
    assert query["id_token_hint"] and query["post_logout_redirect_uri"] == [
        f"{browser.gantry}/accounts/login/"
    ]
    confirm = browser.get(end_session)
    xsrf = confirm.text.split('name="xsrf" value="')[1].split('"')[0]
    back = browser.post(
        urljoin(str(confirm.url), _form_action(confirm.text, 'name="xsrf"')),
        data={"xsrf": xsrf, "logout": "yes"},
    )
    assert _follow(browser, back, stop=lambda url: url.startswith(browser.gantry)) == (
        f"{browser.gantry}/accounts/login/"
    )
    home = browser.get(f"{browser.gantry}/")
    assert home.status_code == 302 and "/accounts/login/" in home.headers["location"]


# --- Bearer access tokens for the API ------------------------------------------------


def _provider_access_token(sso, browser, resource: str) -> str:
    """An access token from the provider's own authorization-code flow, as a CLI would get it."""
    verifier = uuid.uuid4().hex + uuid.uuid4().hex
    callback = f"{browser.gantry}/oidc/callback/"
    params = {
        "client_id": CLIENT_ID,
        "response_type": "code",
        "scope": "openid api",
        "redirect_uri": callback,
        "resource": resource,
        "state": "cli",
        "code_challenge": generate_code_challenge(verifier, "S256"),
        "code_challenge_method": "S256",
    }
    start = str(httpx.URL(f"{sso.issuer}/auth", params=params))
    back = sign_in(browser, start, stop=lambda url: url.startswith(callback))
    code = parse_qs(urlparse(back).query)["code"][0]
    answer = httpx.post(
        f"{sso.issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": callback,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "code_verifier": verifier,
            "resource": resource,
        },
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def test_the_api_accepts_the_providers_access_token(sso, browser, project):
    gantry_sign_in(browser)  # links alice's identity and applies her groups
    token = _provider_access_token(sso, browser, API_RESOURCE)
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == CLIENT_ID

    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/v1/me/").json()["username"] == "alice"
    slugs = [row["slug"] for row in api.get("/api/v1/projects/").json()["results"]]
    assert slugs == ["vision"]


def test_an_access_token_for_another_api_is_refused(sso, browser, project, caplog):
    gantry_sign_in(browser)
    token = _provider_access_token(sso, browser, OTHER_RESOURCE)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/me/")
    assert response.status_code == 401
    assert "audience" in response.json()["detail"]
    assert "refused a bearer token" in caplog.text


@pytest.mark.parametrize(
    "case,claims,message",
    [
        ("expired", {"exp": -3600, "iat": -7200}, "expired"),
        ("wrong audience", {"aud": "someone-else"}, "audience"),
        ("wrong issuer", {"iss": "https://evil.example.org"}, "issued"),
        ("forged", {"forged": True}, "not valid"),
        ("unknown key", {"kid": "other-key"}, "does not publish"),
        ("not a jwt", {"raw": "abc.def"}, "Not a JWT"),
        ("hmac", {"alg": "HS256"}, "only RS256"),
    ],
)
def test_bad_bearer_tokens_are_refused_with_401_and_logged(
    sso, project, caplog, case, claims, message
):
    get_user_model().objects.create_user("alice", oidc_subject=ALICE["sub"])
    now = int(time.time())
    claims = dict(claims)
    if "raw" in claims:
        token = claims["raw"]
    elif claims.pop("alg", None) == "HS256":
        token = jwt.encode({"sub": ALICE["sub"]}, "a-shared-secret-" * 4, algorithm="HS256")
    elif claims.pop("forged", False):
        token = sso.mint(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))
    elif "kid" in claims:
        token = sso.mint(kid=claims["kid"])
    else:
        for name in ("exp", "iat"):
            if name in claims:
                claims[name] += now
        token = sso.mint(**claims)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/me/")
    assert response.status_code == 401, response.content
    assert message in response.json()["detail"]
    assert "refused a bearer token" in caplog.text


def test_a_valid_token_for_someone_who_never_signed_in_is_refused(sso, db):
    response = Client(HTTP_AUTHORIZATION=f"Bearer {sso.mint(sub='nobody')}").get("/api/v1/me/")
    assert response.status_code == 401
    assert "sign in through single sign-on once" in response.json()["detail"]


# --- The ID token checks mozilla-django-oidc leaves out ----------------------------


@pytest.mark.parametrize(
    "claims,message",
    [
        ({"aud": "someone-else"}, "audience"),
        ({"iss": "https://evil.example.org"}, "issued"),
        ({"aud": [CLIENT_ID, "other"], "azp": "other"}, "authorized party"),
        ({"nonce": "replayed"}, "nonce"),
    ],
)
def test_id_tokens_are_checked_for_issuer_audience_and_nonce(sso, claims, message):
    token = sso.mint(**{"nonce": "n-1", **claims})
    with pytest.raises(oidc.InvalidToken, match=message):
        oidc.GantryOIDCBackend().verify_token(token, nonce="n-1")


def test_a_good_id_token_passes(sso):
    claims = oidc.GantryOIDCBackend().verify_token(sso.mint(nonce="n-1"), nonce="n-1")
    assert claims["sub"] == ALICE["sub"]


# --- A provider that is down or misconfigured --------------------------------------


def test_unreachable_provider_gives_a_clear_error_page(settings, client, db, caplog):
    settings.OIDC_OP_ISSUER = "http://127.0.0.1:9"  # discard port: nothing listens
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    oidc.forget_provider()
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 502
    assert "cannot be reached right now" in response.content.decode()
    assert "discovery document" in caplog.text
    oidc.forget_provider()


def test_provider_whose_discovery_names_another_issuer_is_refused(sso, settings, client, caplog):
    settings.OIDC_OP_ISSUER = sso.issuer.replace("127.0.0.1", "localhost")
    oidc.forget_provider()
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 502
    assert "must be identical" in caplog.text


def test_callback_without_a_started_sign_in_is_a_400_page(sso, client):
    response = client.get("/oidc/callback/?code=abc&state=never-issued")
    assert response.status_code == 400
    assert "stale" in response.content.decode()


def test_sso_pages_answer_404_when_not_configured(client, db):
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=a&state=b").status_code == 404


# --- Settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "env,name",
    [
        (
            {"GANTRY_OIDC_TENANT_GROUP_PATTERN": "/labs/{tenant}"},
            "GANTRY_OIDC_TENANT_GROUP_PATTERN",
        ),
        ({"OIDC_OP_ISSUER": "https://sso.example.org/realms/lab"}, "OIDC_RP_CLIENT_ID"),
        (
            {
                "OIDC_OP_ISSUER": "sso.example.org",
                "OIDC_RP_CLIENT_ID": "g",
                "OIDC_RP_CLIENT_SECRET": "s",
            },
            "OIDC_OP_ISSUER",
        ),
    ],
)
def test_bad_sso_settings_stop_startup_with_a_readable_message(env, name):
    from tests.core.test_settings import manage

    result = manage("check", **env)
    assert result.returncode != 0
    assert f"Configuration error in {name}" in result.stderr


def test_local_sign_out_stays_in_gantry(client_for, owner, settings):
    settings.OIDC_OP_ISSUER = "https://sso.example.org/realms/lab"  # configured, but not used
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    response = client_for(owner).post("/accounts/logout/")
    assert response.status_code == 302 and response.url == "/accounts/login/"
