from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def bearer(key):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def test_token_is_shown_once_and_stored_hashed(client_for, owner):
    response = client_for(owner).post(reverse("accounts:token_list"), {"name": "laptop", "scope": "read"})
    token = ApiToken.objects.get(user=owner)
    key = response.context["new_key"]
    assert key.startswith("gty_") and key in response.content.decode()
    assert token.key_hash == ApiToken.hash_key(key) and key not in token.key_hash
    assert key not in client_for(owner).get(reverse("accounts:token_list")).content.decode()


def test_the_curl_example_carries_the_whole_token(client_for, owner):
    # Pasted from the page, the example must work: a truncated token (gty_abc…) did not.
    response = client_for(owner).post(reverse("accounts:token_list"), {"name": "laptop", "scope": "read"})
    key = response.context["new_key"]
    assert f'Authorization: Bearer {key}" http://testserver/api/v1/projects/' in response.content.decode()


def test_token_lists_projects_like_curl_would(owner, project, other_project):
    _, key = services.create_api_token(actor=owner, name="ci")
    response = bearer(key).get("/api/v1/projects/")
    assert response.status_code == 200
    assert [p["slug"] for p in response.json()["results"]] == ["vision"]
    assert ApiToken.objects.get(user=owner).last_used_at is not None


def test_read_only_token_cannot_write(owner, tenant):
    _, key = services.create_api_token(actor=owner, name="ro", scope="read")
    response = bearer(key).post("/api/v1/projects/", {"tenant": tenant.pk, "name": "New", "slug": "new"}, format="json")
    assert response.status_code == 403


def test_write_token_creates_a_project(owner, tenant):
    _, key = services.create_api_token(actor=owner, name="rw", scope="write")
    response = bearer(key).post("/api/v1/projects/", {"tenant": tenant.pk, "name": "New", "slug": "new"}, format="json")
    assert response.status_code == 201, response.content


def test_project_scoped_token_sees_only_its_project(owner, tenant, project):
    from projects import services as project_services

    second = project_services.create_project(actor=owner, tenant=tenant, name="Audio", slug="audio")
    _, key = services.create_api_token(actor=owner, name="one", scope="write", project=project)
    api = bearer(key)
    assert api.get(f"/api/v1/projects/{project.pk}/").status_code == 200
    assert api.get(f"/api/v1/projects/{second.pk}/").status_code == 404
    assert api.patch(f"/api/v1/tenants/{tenant.pk}/", {"name": "x"}, format="json").status_code in (403, 404)


def test_revoked_and_expired_tokens_stop_working(owner):
    token, key = services.create_api_token(actor=owner, name="old")
    assert bearer(key).get("/api/v1/me/").status_code == 200
    services.revoke_api_token(actor=owner, token=token)
    assert bearer(key).get("/api/v1/me/").status_code == 401

    token2, key2 = services.create_api_token(actor=owner, name="short", expires_at=timezone.now() + timedelta(minutes=1))
    ApiToken.objects.filter(pk=token2.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(key2).get("/api/v1/me/").status_code == 401


def test_garbage_token_is_401_not_500():
    assert bearer("gty_nonsense").get("/api/v1/projects/").status_code == 401
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer a b c")
    assert api.get("/api/v1/projects/").status_code == 401


def test_token_api_create_returns_key_once_and_delete_revokes(api_for, owner):
    api = api_for(owner)
    created = api.post("/api/v1/tokens/", {"name": "bot", "scope": "write"}, format="json")
    assert created.status_code == 201 and created.json()["key"].startswith("gty_")
    token_id = created.json()["id"]
    assert "key" not in api.get(f"/api/v1/tokens/{token_id}/").json()
    assert api.delete(f"/api/v1/tokens/{token_id}/").status_code == 204
    assert ApiToken.objects.get(pk=token_id).revoked_at is not None


def test_token_expiry_in_the_past_is_a_400(api_for, owner):
    response = api_for(owner).post("/api/v1/tokens/", {"name": "bot", "expires_at": "2001-01-01T00:00:00Z"}, format="json")
    assert response.status_code == 400 and "expires_at" in response.json()
