"""Single sign-on groups -> tenant and project roles (projects.sso), step by step, with real
rows: each step is a function of its own, reached here without a provider (the whole
sign-in against a real one is tests/accounts/test_oidc.py)."""

import pytest

from accounts import services as account_services
from accounts.models import Membership, MembershipSource, TenantRole
from core.models import AuditEvent
from projects import services as project_services
from projects import sso
from projects.models import ProjectMember, ProjectRole

pytestmark = pytest.mark.django_db


# --- Group patterns ---------------------------------------------------------------


def test_groups_map_by_the_configured_pattern_highest_role_wins(settings):
    settings.GANTRY_OIDC_TENANT_GROUP_PATTERN = "gantry-{tenant}-{role}"
    settings.GANTRY_OIDC_PROJECT_GROUP_PATTERN = "gantry-{tenant}-{project}-{role}"
    grants = sso.parse_groups(
        ["gantry-lab-member", "gantry-lab-owner", "gantry-lab-vision-viewer", "other", 7]
    )
    assert grants.tenants == {"lab": "owner"}
    assert grants.projects == {("lab", "vision"): "viewer"}
    assert [why for _, why in grants.ignored] == ["not a string"]


def test_a_groups_claim_that_is_not_a_list_is_ignored():
    grants = sso.parse_groups({"evil": True})
    assert not grants.tenants and grants.ignored


def test_unknown_tenants_and_projects_are_left_out_and_logged(make_user, project, caplog):
    alice = make_user("alice")
    grants = sso.parse_groups(
        ["/labs/lab-a/admin", "/labs/ghost/owner", "/labs/lab-a/projects/nope/developer"]
    )
    tenants = sso.named_tenants(alice, grants)
    assert list(tenants) == ["lab-a"]
    assert sso.wanted_projects(alice, grants, tenants) == {}
    assert "unknown tenant 'ghost'" in caplog.text
    assert "unknown project lab-a/nope" in caplog.text


def test_a_project_role_brings_membership_of_its_tenant(make_user, project):
    alice = make_user("alice")
    grants = sso.parse_groups(["/labs/lab-a/projects/vision/developer"])
    tenants = sso.named_tenants(alice, grants)
    projects = sso.wanted_projects(alice, grants, tenants)
    assert projects == {project.pk: (project, ProjectRole.DEVELOPER)}
    wanted = sso.wanted_tenants(grants, tenants, projects)
    assert wanted == {project.tenant_id: (project.tenant, TenantRole.MEMBER)}


def test_sync_memberships_grants_changes_and_drops_only_sso_rows(
    make_user, tenant, other_tenant, outsider
):
    alice = make_user("alice")
    account_services.TENANT_MEMBERS.add(actor=outsider, place=other_tenant, user=alice, role="member")  # local
    kept = sso.sync_memberships(alice, {tenant.pk: (tenant, TenantRole.ADMIN)})
    assert set(kept) == {tenant.pk, other_tenant.pk}
    row = Membership.objects.get(user=alice, tenant=tenant)
    assert (row.role, row.source) == (TenantRole.ADMIN, MembershipSource.OIDC)

    sso.sync_memberships(alice, {tenant.pk: (tenant, TenantRole.MEMBER)})
    assert Membership.objects.get(user=alice, tenant=tenant).role == TenantRole.MEMBER
    kept = sso.sync_memberships(alice, {})
    assert set(kept) == {other_tenant.pk}  # the local membership is not the provider's
    assert list(
        AuditEvent.objects.filter(details__source="oidc", details__user="alice")
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["membership.add", "membership.change", "membership.remove"]


def test_dropping_a_membership_drops_the_project_roles_in_that_tenant(make_user, project):
    alice = make_user("alice")
    sso.apply_groups(alice, ["/labs/lab-a/projects/vision/viewer"])
    assert ProjectMember.objects.get(user=alice, project=project).role == ProjectRole.VIEWER
    sso.apply_groups(alice, [])
    assert not Membership.objects.filter(user=alice).exists()
    assert not ProjectMember.objects.filter(user=alice).exists()


def test_a_local_project_role_is_never_changed_by_the_provider(make_user, owner, project):
    alice = make_user("alice")
    sso.apply_groups(alice, ["/labs/lab-a/member"])
    project_services.add_project_member(actor=owner, project=project, user=alice, role="maintainer")
    sso.sync_project_members(alice, {project.pk: (project, ProjectRole.VIEWER)})
    sso.sync_project_members(alice, {})
    member = ProjectMember.objects.get(user=alice, project=project)
    assert (member.role, member.source) == (ProjectRole.MAINTAINER, MembershipSource.LOCAL)
