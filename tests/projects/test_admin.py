"""The Django admin writes projects and project members through projects.services: audited
like any other change, and a refusal (a member from outside the tenant) changes nothing."""

import pytest
from django.urls import reverse

from core.models import AuditEvent
from projects.models import Project, ProjectMember, ProjectRole
from tests.accounts.test_admin import inline, lab_admin  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def project_form(project, rows=(), initial=0, **fields):
    return {
        "name": project.name,
        "slug": project.slug,
        "description": project.description,
        "visibility": project.visibility,
        **fields,
        **inline("members", rows, initial),
    }


def test_admin_creates_a_project_with_an_audit_event(client, lab_admin, tenant, member):  # noqa: F811
    response = client.post(
        reverse("admin:projects_project_add"),
        {
            "tenant": tenant.pk,
            "name": "Speech",
            "slug": "speech",
            "description": "",
            "visibility": "private",
            **inline("members", [{"user": member.pk, "role": ProjectRole.DEVELOPER}]),
        },
    )
    assert response.status_code == 302
    project = Project.objects.get(tenant=tenant, slug="speech")
    assert project.created_by == lab_admin
    assert list(project.members.values_list("user", "role")) == [(member.pk, "developer")]
    events = AuditEvent.objects.filter(actor=lab_admin, tenant=tenant)
    assert set(events.values_list("action", flat=True)) == {"project.create", "projectmember.add"}


def test_admin_edits_a_project_with_an_audit_event(client, lab_admin, project):  # noqa: F811
    members = list(project.members.all())
    rows = [{"id": m.pk, "project": project.pk, "user": m.user_id, "role": m.role} for m in members]
    response = client.post(
        reverse("admin:projects_project_change", args=[project.pk]),
        project_form(project, rows, len(rows), visibility="private"),
    )
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.visibility == "private"
    event = AuditEvent.objects.get(action="project.change", actor=lab_admin)
    assert event.details == {"fields": ["visibility"]}


def test_admin_cannot_add_someone_outside_the_tenant_and_nothing_changes(
    client, lab_admin, project, outsider  # noqa: F811
):
    members = list(project.members.all())
    rows = [{"id": m.pk, "project": project.pk, "user": m.user_id, "role": m.role} for m in members]
    rows.append({"user": outsider.pk, "role": ProjectRole.VIEWER})
    page = client.post(
        reverse("admin:projects_project_change", args=[project.pk]),
        project_form(project, rows, len(members), name="Renamed"),
    )
    assert page.status_code == 302
    project.refresh_from_db()
    assert project.name == "Vision"  # the whole change was rolled back
    assert not ProjectMember.objects.filter(user=outsider).exists()
    assert not AuditEvent.objects.filter(actor=lab_admin).exclude(action="auth.login").exists()
    shown = client.get(page.headers["location"]).content.decode()
    assert "is not a member of Lab A; add them to the tenant first." in shown


def test_admin_changes_and_removes_a_project_member_with_audit_events(
    client, lab_admin, project, owner  # noqa: F811
):
    member = ProjectMember.objects.get(project=project, user=owner)
    changed = client.post(
        reverse("admin:projects_projectmember_change", args=[member.pk]),
        {"role": ProjectRole.VIEWER},
    )
    assert changed.status_code == 302
    removed = client.post(
        reverse("admin:projects_projectmember_delete", args=[member.pk]), {"post": "yes"}
    )
    assert removed.status_code == 302
    assert not ProjectMember.objects.filter(pk=member.pk).exists()
    actions = AuditEvent.objects.filter(actor=lab_admin).exclude(action="auth.login").order_by("id")
    assert list(actions.values_list("action", flat=True)) == [
        "projectmember.change",
        "projectmember.remove",
    ]


def test_admin_deletes_a_project_with_an_audit_event(client, lab_admin, project):  # noqa: F811
    response = client.post(
        reverse("admin:projects_project_delete", args=[project.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Project.objects.filter(pk=project.pk).exists()
    assert AuditEvent.objects.get(action="project.delete", actor=lab_admin).details == {
        "name": "Vision"
    }
