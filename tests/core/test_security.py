"""Hardening: Content-Security-Policy and the token rate limit (sign-in lockout:
tests/accounts/test_lockout.py).

The browser test loads the main pages in Debian's chromium (Playwright) against the
live server and fails on any CSP violation the browser reports. The ORM is used only
before the browser starts: Playwright's sync API runs an event loop in this thread.
"""

import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import Client
from django.urls import Resolver404, resolve, reverse
from rest_framework.throttling import ScopedRateThrottle

from accounts.models import ApiToken
from jobs.services.submit import submit_job
from tests.conftest import service_required

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


# --- Content-Security-Policy ---------------------------------------------------------


def test_pages_carry_a_strict_content_security_policy(client, db):
    policy = client.get(reverse("login"))["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    assert directives["form-action"] == "'self'"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_form_action_admits_the_sso_provider_when_configured(client, settings, db):
    settings.OIDC_OP_ISSUER = "https://sso.example.org/realms/lab"
    policy = client.get(reverse("login"))["Content-Security-Policy"]
    assert "form-action 'self' https://sso.example.org;" in policy + ";"


def test_api_responses_carry_the_policy_too(client, db):
    assert "default-src 'self'" in client.get("/api/v1/me/")["Content-Security-Policy"]


def test_gantry_serves_no_notebook_and_exempts_nothing_from_its_policy():
    # JupyterLab (inline scripts, its own policy) is served on an origin of its own
    # (interactive/origin.py): Gantry's origin has no route to it and no page without CSP.
    assert list(django_settings.GANTRY_CSP_EXEMPT_URL_NAMES) == []
    with pytest.raises(Resolver404):
        resolve("/jobs/1/lab/api/kernels")


def _template_files():
    folders = [ROOT / "templates", *ROOT.glob("*/templates")]
    return sorted(p for folder in folders for p in folder.rglob("*.html") if ".venv" not in p.parts)


INLINE_SCRIPT = re.compile(
    r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/(?:json|ld\+json)\")[^>]*>"
)
INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)


@pytest.mark.parametrize("path", _template_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_templates_have_no_inline_script_style_or_handler(path):
    text = path.read_text()
    assert not INLINE_SCRIPT.search(text), "inline <script>: move it to a static file"
    assert "style=" not in text, "style attribute: CSP blocks it; use a class in gantry.css"
    assert "<style" not in text, "<style> element: CSP blocks it; use gantry.css"
    assert not INLINE_HANDLER.search(text), "inline event handler: CSP blocks it"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_main_pages_raise_no_csp_violation_in_chromium(
    live_server, owner, tenant, project, make_user
):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is a dev dependency
        sync_playwright = None
    service_required(
        "chromium + playwright", Path(CHROMIUM).exists() and sync_playwright is not None
    )

    job = submit_job(owner, project, name="csp", command="python -c pass")
    admin = make_user("root", is_staff=True, is_superuser=True)
    pages = [
        reverse("home"),
        reverse("accounts:tenant_list"),
        reverse("accounts:tenant_detail", args=[tenant.pk]),
        reverse("projects:project_list"),
        reverse("projects:project_detail", args=[project.pk]),
        reverse("projects:project_members", args=[project.pk]),
        reverse("jobs:job_list"),
        reverse("jobs:job_detail", args=[job.pk]),
        reverse("accounts:token_list"),
        reverse("audit_list"),
        reverse("api-docs"),
    ]
    sessions = {}
    for user in (owner, admin):
        browser_client = Client()
        browser_client.force_login(user)
        sessions[user.username] = browser_client.cookies["sessionid"].value

    violations = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            anonymous = browser.new_context()
            _visit(anonymous, live_server.url, [reverse("login")], violations)
            for username, url_list in (
                ("olivia", pages),
                ("root", [reverse("admin:index"), reverse("admin:accounts_user_changelist")]),
            ):
                context = browser.new_context()
                context.add_cookies(
                    [{"name": "sessionid", "value": sessions[username], "url": live_server.url}]
                )
                _visit(context, live_server.url, url_list, violations)
        finally:
            browser.close()
    assert not violations, "\n".join(violations)


def _visit(context, base, paths, violations):
    page = context.new_page()
    page.on(
        "console",
        lambda msg: (
            violations.append(f"{page.url}: {msg.text}")
            if "Content Security Policy" in msg.text
            else None
        ),
    )
    for path in paths:
        response = page.goto(base + path, wait_until="load")
        assert response is not None and response.status == 200, (
            f"{path}: {response and response.status}"
        )
    page.close()


# --- Rate limits -------------------------------------------------------------------


@pytest.fixture
def fresh_limits(owner):
    cache.delete(f"throttle_token_create_{owner.pk}")
    yield
    cache.delete(f"throttle_token_create_{owner.pk}")


def test_token_creation_on_the_settings_page_shares_the_api_throttle(
    client_for, owner, monkeypatch, fresh_limits
):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"token_create": "2/hour"})
    client = client_for(owner)
    url = reverse("accounts:token_list")
    assert client.post(url, {"name": "one", "scope": "read"}).status_code == 200
    assert client.post("/api/v1/tokens/", {"name": "two", "scope": "read"}).status_code == 201
    refused = client.post(url, {"name": "three", "scope": "read"})
    assert refused.status_code == 429
    assert "Too many new tokens" in refused.content.decode()
    assert ApiToken.objects.filter(user=owner).count() == 2
