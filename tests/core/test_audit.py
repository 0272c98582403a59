import pytest
from django.urls import reverse

from core.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_owner_sees_their_tenants_events_and_not_others(client_for, owner, tenant, other_tenant, member):
    page = client_for(owner).get(reverse("audit_list"))
    actions = {(e.action, e.tenant_id) for e in page.context["objects"]}
    assert ("membership.add", tenant.pk) in actions
    assert all(tenant_id != other_tenant.pk for _, tenant_id in actions)


def test_plain_member_sees_no_tenant_events(client_for, member, tenant):
    page = client_for(member).get(reverse("audit_list"))
    assert list(page.context["objects"]) == []


def test_logins_and_failed_logins_are_recorded(client, owner):
    client.post(reverse("login"), {"username": owner.username, "password": "wrong"})
    client.post(reverse("login"), {"username": owner.username, "password": "pw-" + owner.username})
    assert AuditEvent.objects.filter(action="auth.login_failed", details__username=owner.username).exists()
    assert AuditEvent.objects.filter(action="auth.login", actor=owner).exists()


def test_role_change_records_who_what_and_from_where(client_for, owner, tenant, member):
    membership = tenant.memberships.get(user=member)
    client_for(owner).post(reverse("accounts:member_edit", args=[membership.pk]), {"role": "admin"}, REMOTE_ADDR="10.1.2.3")
    event = AuditEvent.objects.get(action="membership.change")
    assert event.actor == owner and event.details == {"user": "max", "old": "member", "new": "admin"}
    assert event.ip_address == "10.1.2.3"


def test_audit_log_is_read_only_in_admin(admin_client):
    services_event = AuditEvent.objects.create(action="x")
    assert admin_client.get(reverse("admin:core_auditevent_change", args=[services_event.pk])).status_code == 200
    assert admin_client.post(reverse("admin:core_auditevent_delete", args=[services_event.pk]), {"post": "yes"}).status_code == 403
