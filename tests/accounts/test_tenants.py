import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from accounts import services
from accounts.models import Membership, Tenant, TenantRole
from core.models import AuditEvent
from projects.models import Project

pytestmark = pytest.mark.django_db


def test_creator_of_a_tenant_becomes_its_owner(owner):
    tenant = services.create_tenant(actor=owner, name="Robotics", slug="robotics")
    assert Membership.objects.get(tenant=tenant, user=owner).role == TenantRole.OWNER
    assert AuditEvent.objects.filter(action="tenant.create", tenant=tenant).exists()


def test_create_tenant_through_the_form(client_for, owner):
    response = client_for(owner).post(
        reverse("accounts:tenant_add"), {"name": "Robotics Lab", "slug": ""}
    )
    tenant = Tenant.objects.get(slug="robotics-lab")
    assert response.status_code == 302 and response.url == tenant.get_absolute_url()


def test_duplicate_slug_is_a_field_error_not_a_500(client_for, owner, tenant):
    response = client_for(owner).post(
        reverse("accounts:tenant_add"), {"name": "Again", "slug": "lab-a"}
    )
    assert response.status_code == 400
    assert "already exists" in response.content.decode()
    assert Tenant.objects.filter(slug="lab-a").count() == 1


def test_member_cannot_edit_tenant(client_for, member, tenant):
    response = client_for(member).post(
        reverse("accounts:tenant_edit", args=[tenant.pk]), {"name": "Mine", "slug": "lab-a"}
    )
    assert response.status_code == 403
    tenant.refresh_from_db()
    assert tenant.name == "Lab A"


def test_outsider_gets_404_for_a_foreign_tenant(client_for, outsider, tenant):
    assert client_for(outsider).get(tenant.get_absolute_url()).status_code == 404


def test_owner_adds_member_with_role(client_for, owner, tenant, make_user):
    newcomer = make_user("nina")
    response = client_for(owner).post(
        reverse("accounts:member_add", args=[tenant.pk]),
        {"user": "nina@example.org", "role": "admin"},
    )
    assert response.status_code == 302
    assert Membership.objects.get(tenant=tenant, user=newcomer).role == TenantRole.ADMIN


def test_adding_unknown_user_explains_why(client_for, owner, tenant):
    response = client_for(owner).post(
        reverse("accounts:member_add", args=[tenant.pk]), {"user": "ghost", "role": "member"}
    )
    assert response.status_code == 400
    assert "No user" in response.content.decode()


def test_admin_cannot_grant_owner(tenant, owner, member, make_user):
    admin = make_user("ada")
    services.TENANT_MEMBERS.add(actor=owner, place=tenant, user=admin, role=TenantRole.ADMIN)
    membership = Membership.objects.get(tenant=tenant, user=member)
    with pytest.raises(PermissionDenied):
        services.TENANT_MEMBERS.change_role(actor=admin, member=membership, role=TenantRole.OWNER)


def test_last_owner_cannot_be_demoted_or_removed(tenant, owner):
    membership = Membership.objects.get(tenant=tenant, user=owner)
    with pytest.raises(ValidationError):
        services.TENANT_MEMBERS.change_role(actor=owner, member=membership, role=TenantRole.MEMBER)
    with pytest.raises(ValidationError):
        services.TENANT_MEMBERS.remove(actor=owner, member=membership)
    assert Membership.objects.get(pk=membership.pk).role == TenantRole.OWNER


def test_removing_a_member_removes_their_project_roles(tenant, owner, member, project):
    from projects import services as project_services
    from projects.models import ProjectMember

    project_services.add_project_member(actor=owner, project=project, user=member, role="developer")
    services.TENANT_MEMBERS.remove(
        actor=owner, member=Membership.objects.get(tenant=tenant, user=member)
    )
    assert not ProjectMember.objects.filter(user=member).exists()


def test_deleting_a_tenant_with_content_asks_for_confirmation(client_for, owner, tenant, project):
    client = client_for(owner)
    url = reverse("accounts:tenant_delete", args=[tenant.pk])
    page = client.get(url)
    assert "1 projects" in page.content.decode()
    refused = client.post(url, {"confirm": "wrong"})
    assert refused.status_code == 400 and Tenant.objects.filter(pk=tenant.pk).exists()
    done = client.post(url, {"confirm": "lab-a"})
    assert done.status_code == 302
    assert not Tenant.objects.filter(pk=tenant.pk).exists()
    assert not Project.objects.filter(pk=project.pk).exists()


def test_tenant_switcher_only_accepts_visible_tenants(client_for, outsider, tenant, other_tenant):
    client = client_for(outsider)
    assert client.post(reverse("accounts:switch_tenant"), {"tenant": tenant.pk}).status_code == 404
    assert client.post(
        reverse("accounts:switch_tenant"),
        {"tenant": other_tenant.pk, "next": "https://evil.example/"},
    ).url == reverse("home")
    assert client.session["tenant_id"] == other_tenant.pk


def test_tenant_list_query_count_does_not_grow(client_for, owner, django_assert_max_num_queries):
    for i in range(30):
        services.create_tenant(actor=owner, name=f"T{i}", slug=f"t{i}")
    client = client_for(owner)
    with django_assert_max_num_queries(8):
        response = client.get(reverse("accounts:tenant_list"))
    assert response.status_code == 200 and "T29" in response.content.decode()
