"""Settings: the project a bare MLflow experiment or model name means."""

import pytest

pytestmark = pytest.mark.django_db


def test_owner_chooses_and_clears_the_default_project(client_for, owner, project):
    client = client_for(owner)
    page = client.get("/settings/tokens/")
    assert b"Default project for MLflow" in page.content
    response = client.post("/settings/default-project/", {"default_project": project.pk})
    assert response.status_code == 302
    owner.refresh_from_db()
    assert owner.default_project == project
    client.post("/settings/default-project/", {"default_project": ""})
    owner.refresh_from_db()
    assert owner.default_project is None


def test_a_project_the_user_cannot_see_is_refused_and_nothing_changes(
    client_for, owner, project, other_project
):
    client = client_for(owner)
    client.post("/settings/default-project/", {"default_project": project.pk})
    response = client.post(
        "/settings/default-project/", {"default_project": other_project.pk}, follow=True
    )
    assert b"Select a valid choice" in response.content
    owner.refresh_from_db()
    assert owner.default_project == project
