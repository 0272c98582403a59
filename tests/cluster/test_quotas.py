import pytest
from django.urls import reverse

from core.models import AuditEvent
from scheduling.models import TenantQuota

pytestmark = pytest.mark.django_db


def test_owner_sets_a_quota_and_it_is_audited(client_for, owner, tenant):
    response = client_for(owner).post(reverse("scheduling:quota_edit", args=[tenant.pk]), {"guaranteed_gpus": 4, "borrow_limit_gpus": 2, "weight": 1})
    assert response.status_code == 302
    quota = TenantQuota.objects.get(tenant=tenant)
    assert (quota.guaranteed_gpus, quota.max_gpus) == (4, 6)
    event = AuditEvent.objects.get(action="quota.change")
    assert event.details["after"]["guaranteed_gpus"] == 4 and event.tenant == tenant


def test_member_cannot_change_the_quota(client_for, member, tenant):
    response = client_for(member).post(reverse("scheduling:quota_edit", args=[tenant.pk]), {"guaranteed_gpus": 99, "borrow_limit_gpus": 0, "weight": 1})
    assert response.status_code == 403
    assert not TenantQuota.objects.exists()


def test_negative_or_zero_values_are_field_errors(client_for, owner, tenant):
    response = client_for(owner).post(reverse("scheduling:quota_edit", args=[tenant.pk]), {"guaranteed_gpus": -1, "borrow_limit_gpus": 0, "weight": 0})
    assert response.status_code == 400
    assert not TenantQuota.objects.exists()


def test_cluster_page_shows_this_machine_and_only_my_tenants(client_for, owner, tenant, other_tenant):
    page = client_for(owner).get(reverse("scheduling:overview"))
    assert page.status_code == 200
    assert [row["tenant"] for row in page.context["rows"]] == [tenant]
    node = page.context["nodes"][0]
    assert node["backend"] == "local" and node["cpus"] >= 1 and node["memory_mb"] > 0
