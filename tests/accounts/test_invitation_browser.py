"""An invitation in a real browser (Debian's chromium under Playwright, against Django's
live server): the owner invites from the tenant page, the invitee opens the emailed link
signed out, creates an account and lands in the tenant, signed in. The mail goes through
the locmem backend the test settings set (the live server runs in this process)."""

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from accounts.models import Membership
from tests.conftest import service_required

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "a long enough passphrase 42"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_invitee_accepts_from_the_emailed_link_in_chromium(live_server, owner, tenant):
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:  # pragma: no cover - playwright is a dev dependency
        sync_playwright = None
    service_required(
        "chromium + playwright", Path(CHROMIUM).exists() and sync_playwright is not None
    )
    expect.set_options(timeout=15_000)
    signed_in = Client()
    signed_in.force_login(owner)
    session = signed_in.cookies["sessionid"].value

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            errors = []
            admin = browser.new_context()
            admin.add_cookies([{"name": "sessionid", "value": session, "url": live_server.url}])
            page = admin.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live_server.url}/tenants/{tenant.pk}/")
            page.get_by_role("link", name="Invite by email").click()
            page.locator("#id_email").fill("ada@example.org")
            page.locator("#id_role").select_option("admin")
            page.get_by_role("button", name="Send invitation").click()
            expect(page.locator("#invitations")).to_contain_text("ada@example.org")
            assert len(mail.outbox) == 1
            link = re.search(r"https?://\S+/invitations/accept/\S+/", mail.outbox[0].body)
            assert link and link.group(0).startswith(live_server.url), mail.outbox[0].body

            invitee = browser.new_context()  # signed out, as from a mail client
            page = invitee.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(link.group(0))
            expect(page.locator("h1")).to_contain_text("Join Lab A")
            page.locator("#id_username").fill("ada")
            page.locator("#id_password1").fill("short")
            page.locator("#id_password2").fill("short")
            page.get_by_role("button", name="Create account and join").click()
            expect(page.locator("#invitation")).to_contain_text("too short")
            expect(page.locator("#id_username")).to_have_value("ada")  # refused: no account
            page.locator("#id_username").fill("ada")
            page.locator("#id_password1").fill(PASSWORD)
            page.locator("#id_password2").fill(PASSWORD)
            page.get_by_role("button", name="Create account and join").click()
            expect(page.locator("h1")).to_have_text("Lab A")
            expect(page.locator("body")).to_contain_text("Welcome to Lab A, ada")

            # The link worked once.
            page.goto(link.group(0))
            expect(page.locator("#invitation-problem")).to_contain_text("already used")
            assert not errors, errors
        finally:
            browser.close()
    # (The ORM is read here: Playwright's sync API runs an event loop in this thread.)
    ada = get_user_model().objects.get(username="ada")
    assert ada.email == "ada@example.org" and ada.check_password(PASSWORD)
    assert Membership.objects.get(tenant=tenant, user=ada).role == "admin"
