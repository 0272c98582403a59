"""A token creates only tokens no wider than itself: a project-limited token only
tokens of its project, a read-only token none, a token that expires only tokens that
expire no later. A signed-in session (no token) may create any token of its user."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiToken
from core.models import AuditEvent
from jobs.services.submit import submit_job
from projects import services as project_services

pytestmark = pytest.mark.django_db
URL = "/api/v1/tokens/"


def bearer(key):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


@pytest.fixture
def audio(owner, tenant):
    return project_services.create_project(actor=owner, tenant=tenant, name="Audio", slug="audio")


@pytest.fixture
def limited(owner, project):
    token, key = services.create_api_token(actor=owner, name="vision-ci", scope="write", project=project)
    return token, bearer(key)


def test_a_project_token_cannot_mint_an_unscoped_one(owner, limited):
    """The issue's reproduction: this answered 201 with project null."""
    before = ApiToken.objects.count()
    response = limited[1].post(URL, {"name": "escape", "scope": "write"}, format="json")
    assert response.status_code == 403, response.content
    assert "limited to one project" in response.json()["detail"]
    assert ApiToken.objects.count() == before


def test_a_project_token_cannot_mint_one_for_another_project(owner, limited, audio):
    response = limited[1].post(URL, {"name": "other", "scope": "write", "project": audio.pk}, format="json")
    # The other project is out of the token's reach: it reads as one that does not exist.
    assert response.status_code == 404, response.content
    assert not ApiToken.objects.filter(name="other").exists()


def test_a_project_token_mints_one_of_its_project_that_reads_no_other(owner, project, audio, limited):
    submit_job(owner, project, name="vision-job", command="python -c pass")
    elsewhere = submit_job(owner, audio, name="private-job-A", command="python -c pass")
    response = limited[1].post(URL, {"name": "child", "scope": "write", "project": project.pk}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["project"] == project.pk
    child = bearer(response.json()["key"])
    assert [j["name"] for j in child.get("/api/v1/jobs/").json()["results"]] == ["vision-job"]
    assert child.get(f"/api/v1/jobs/{elsewhere.pk}/").status_code == 404
    assert child.post("/api/v1/jobs/", {"project": audio.pk, "command": "true"}, format="json").status_code == 404
    event = AuditEvent.objects.filter(action="token.create").latest("pk")
    assert event.details["via"] == limited[0].key_prefix


def test_a_project_token_may_mint_a_read_only_one_of_its_project(project, limited):
    response = limited[1].post(URL, {"name": "ro", "scope": "read", "project": project.pk}, format="json")
    assert response.status_code == 201 and response.json()["scope"] == "read"


def test_a_read_only_token_mints_nothing(owner):
    _, key = services.create_api_token(actor=owner, name="ro", scope="read")
    response = bearer(key).post(URL, {"name": "ro-child", "scope": "read"}, format="json")
    assert response.status_code == 403
    assert not ApiToken.objects.filter(name="ro-child").exists()


def test_a_token_that_expires_mints_none_that_outlives_it(owner):
    ends = timezone.now() + timedelta(days=1)
    _, key = services.create_api_token(actor=owner, name="short", scope="write", expires_at=ends)
    api = bearer(key)
    later = api.post(URL, {"name": "long", "scope": "read", "expires_at": (ends + timedelta(days=1)).isoformat()},
                     format="json")
    assert later.status_code == 403 and "expire no later" in later.json()["detail"]
    unset = api.post(URL, {"name": "same", "scope": "read"}, format="json")
    assert unset.status_code == 201
    assert ApiToken.objects.get(name="same").expires_at == ends


def test_a_full_token_and_a_session_mint_any_token(owner, project, api_for):
    _, key = services.create_api_token(actor=owner, name="full", scope="write")
    assert bearer(key).post(URL, {"name": "wide", "scope": "write"}, format="json").status_code == 201
    assert api_for(owner).post(URL, {"name": "wider", "scope": "write"}, format="json").status_code == 201


def test_a_project_token_lists_and_revokes_only_tokens_of_its_project(owner, project, limited):
    wide, _ = services.create_api_token(actor=owner, name="wide", scope="write")
    sibling, _ = services.create_api_token(actor=owner, name="sibling", scope="read", project=project)
    api = limited[1]
    listed = {t["name"] for t in api.get(URL).json()["results"]}
    assert listed == {"vision-ci", "sibling"}
    assert api.delete(f"{URL}{wide.pk}/").status_code == 404
    assert ApiToken.objects.get(pk=wide.pk).revoked_at is None
    assert api.delete(f"{URL}{sibling.pk}/").status_code == 204


def test_the_service_applies_the_rule_whoever_calls_it(owner, project, limited):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        services.create_api_token(actor=owner, name="x", scope="write", via=limited[0])
    token, _ = services.create_api_token(actor=owner, name="y", scope="write", project=project, via=limited[0])
    assert token.project_id == project.pk
