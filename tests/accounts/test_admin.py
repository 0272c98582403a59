"""The Django admin writes tenants and memberships through accounts.services: every save and
delete is permission-checked, validated and audited like one made in the UI or the API, and
a refusal changes nothing and is shown on the page."""

import pytest
from django.urls import reverse

from accounts import services
from accounts.models import Membership, Tenant, TenantRole
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab_admin(make_user, client):
    admin = make_user("root", is_staff=True, is_superuser=True)
    client.force_login(admin)
    return admin


def inline(prefix, rows=(), initial=0):
    data = {
        f"{prefix}-TOTAL_FORMS": str(len(rows)),
        f"{prefix}-INITIAL_FORMS": str(initial),
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }
    for i, row in enumerate(rows):
        data.update({f"{prefix}-{i}-{name}": value for name, value in row.items()})
    return data


def test_admin_creates_a_tenant_and_its_owner_with_audit_events(client, lab_admin, member):
    response = client.post(
        reverse("admin:accounts_tenant_add"),
        {
            "name": "Lab C",
            "slug": "lab-c",
            "description": "",
            **inline("memberships", [{"user": member.pk, "role": TenantRole.OWNER}]),
        },
    )
    assert response.status_code == 302
    tenant = Tenant.objects.get(slug="lab-c")
    # The administrator named the owner; they did not become a member themselves.
    assert list(tenant.memberships.values_list("user", "role")) == [(member.pk, "owner")]
    events = AuditEvent.objects.filter(actor=lab_admin, tenant=tenant)
    assert set(events.values_list("action", flat=True)) == {"tenant.create", "membership.add"}


def test_admin_edits_a_tenant_with_an_audit_event(client, lab_admin, tenant):
    response = client.post(
        reverse("admin:accounts_tenant_change", args=[tenant.pk]),
        {
            "name": "Lab A renamed",
            "slug": tenant.slug,
            "description": "",
            **inline("memberships", initial=0),
        },
    )
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.name == "Lab A renamed"
    event = AuditEvent.objects.get(action="tenant.change", actor=lab_admin)
    assert event.details == {"fields": ["name"]}


def test_admin_changes_a_role_with_an_audit_event(client, lab_admin, tenant, member):
    membership = Membership.objects.get(tenant=tenant, user=member)
    response = client.post(
        reverse("admin:accounts_membership_change", args=[membership.pk]),
        {"role": TenantRole.ADMIN},
    )
    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.role == TenantRole.ADMIN
    event = AuditEvent.objects.get(action="membership.change", actor=lab_admin)
    assert (event.details["old"], event.details["new"]) == ("member", "admin")


def test_admin_cannot_remove_a_tenants_last_owner_and_nothing_changes(
    client, lab_admin, tenant, owner
):
    membership = Membership.objects.get(tenant=tenant, user=owner)
    page = client.post(
        reverse("admin:accounts_membership_delete", args=[membership.pk]), {"post": "yes"}
    )
    assert page.status_code == 302
    assert Membership.objects.filter(pk=membership.pk).exists()
    assert not AuditEvent.objects.filter(action="membership.remove").exists()
    shown = client.get(page.headers["location"])
    assert "A tenant must keep at least one owner." in shown.content.decode()


def test_admin_removing_a_member_through_the_inline_is_audited(client, lab_admin, tenant, member):
    rows = list(tenant.memberships.order_by("pk"))
    data = {
        "name": tenant.name,
        "slug": tenant.slug,
        "description": "",
        **inline(
            "memberships",
            [
                {"id": m.pk, "tenant": tenant.pk, "user": m.user_id, "role": m.role}
                | ({"DELETE": "on"} if m.user == member else {})
                for m in rows
            ],
            initial=len(rows),
        ),
    }
    response = client.post(reverse("admin:accounts_tenant_change", args=[tenant.pk]), data)
    assert response.status_code == 302
    assert not tenant.memberships.filter(user=member).exists()
    event = AuditEvent.objects.get(action="membership.remove", actor=lab_admin)
    assert event.details == {"user": member.username}


def test_admin_bulk_delete_of_tenants_audits_each(client, lab_admin, tenant, other_tenant):
    response = client.post(
        reverse("admin:accounts_tenant_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [tenant.pk, other_tenant.pk],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert not Tenant.objects.exists()
    deleted = AuditEvent.objects.filter(action="tenant.delete", actor=lab_admin)
    assert sorted(deleted.values_list("details__name", flat=True)) == ["Lab A", "Lab B"]


def test_admin_revokes_tokens_with_audit_events_and_cannot_edit_them(client, lab_admin, member):
    token, _ = services.create_api_token(actor=member, name="ci")
    response = client.post(
        reverse("admin:accounts_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.get(action="token.revoke", actor=lab_admin).object_id == str(token.pk)
    edit = client.post(
        reverse("admin:accounts_apitoken_change", args=[token.pk]), {"name": "renamed"}
    )
    assert edit.status_code == 403
    token.refresh_from_db()
    assert token.name == "ci"
