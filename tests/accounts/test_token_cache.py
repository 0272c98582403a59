"""accounts.authentication.token_by_hash: API tokens and their users kept in the shared
cache, and never trusted from it once a token or a user changed.

These tests commit (transaction=True): entries are only kept outside transactions, and
generations move on commit. The SQLite pass has no Redis: the process's own cache
stands in for it, which is enough for one process.
"""

import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services
from accounts.authentication import token_by_hash
from accounts.models import ApiToken, TokenScope

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/tokens/"


@pytest.fixture(autouse=True)
def shared_cache(settings):
    settings.GANTRY_ACCESS_CACHE = True


def token_for(user, **extra):
    token, key = services.create_api_token(actor=user, name="cli", scope=TokenScope.WRITE, **extra)
    return token, APIClient(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_a_known_token_is_checked_without_the_database(member):
    token, api = token_for(member)
    assert api.get(URL).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        cached = token_by_hash(token.key_hash)
    assert len(queries) == 0
    assert (cached.pk, cached.user.pk, cached.user.username, cached.scope) == (
        token.pk, member.pk, "max", TokenScope.WRITE)


def test_the_password_hash_is_not_kept(member):
    token, api = token_for(member)
    assert api.get(URL).status_code == 200
    entry = cache.get(f"apitoken:1:{token.key_hash}")
    assert entry is not None and member.password not in repr(entry)
    cached = token_by_hash(token.key_hash)
    assert "password" in cached.user.get_deferred_fields()
    assert cached.user.check_password("pw-max")  # loaded when asked for


def test_a_revoked_token_stops_at_once(member):
    token, api = token_for(member)
    assert api.get(URL).status_code == 200
    services.revoke_api_token(actor=member, token=token)
    assert api.get(URL).status_code == 401


def test_a_token_revoked_by_a_queryset_update_stops_at_once(member):
    token, api = token_for(member)
    assert api.get(URL).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert api.get(URL).status_code == 401


def test_a_deactivated_user_stops_at_once(member):
    _, api = token_for(member)
    assert api.get(URL).status_code == 200
    member.is_active = False
    member.save()
    assert api.get(URL).status_code == 401


def test_an_expired_token_stops_although_its_entry_is_current(member):
    _, api = token_for(member, expires_at=timezone.now() + timedelta(seconds=1))
    assert api.get(URL).status_code == 200  # kept in the cache now
    time.sleep(1.1)
    assert api.get(URL).status_code == 401


def test_last_use_is_written_once_a_minute_not_on_every_call(member):
    token, api = token_for(member)
    assert api.get(URL).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    with CaptureQueriesContext(connection) as queries:
        assert api.get(URL).status_code == 200
    assert not [q for q in queries if q["sql"].startswith("UPDATE")]


def test_a_sign_in_does_not_drop_cached_tokens(client, member):
    token, api = token_for(member)
    assert api.get(URL).status_code == 200
    # A password sign-in, as the sign-in page makes it (django-axes needs the request).
    assert client.login(request=HttpRequest(), username="max", password="pw-max")
    with CaptureQueriesContext(connection) as queries:
        token_by_hash(token.key_hash)
    assert len(queries) == 0
