"""Error pages people can find their way back from, and a log without tracebacks for them."""

import logging

import pytest

from tests.core.test_settings import manage

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.core.error_urls")]


def test_403_keeps_the_navigation_and_says_why(client_for, member, caplog):
    client = client_for(member)
    with caplog.at_level(logging.WARNING):
        response = client.get("/forbidden/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "Only the project&#x27;s owners may delete it." in page
    assert 'class="navbar' in page and "Sign out" in page
    # One line in the log, not a traceback per refusal.
    refused = [r for r in caplog.records if "/forbidden/" in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None


def test_404_is_gantrys_page_not_a_url_listing(client_for, member):
    response = client_for(member).get("/no/such/page/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "Nothing here" in page and "Sign out" in page
    assert "URLconf" not in page and "urlpatterns" not in page


def test_404_signed_out_offers_sign_in(client):
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert "Sign in" in response.content.decode()


def test_debug_pages_are_off_unless_asked_for():
    # Django's debug 404 lists every URL pattern: `make run` must not show it by default.
    show = "from django.conf import settings as s; print(s.DEBUG)"
    assert manage("shell", "-c", show).stdout.split()[-1] == "False"
    assert manage("shell", "-c", show, DEBUG="true").stdout.split()[-1] == "True"
