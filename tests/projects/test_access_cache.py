"""projects.permissions.access_of: each user's roles and visible projects, kept in the
shared cache between requests and never used once memberships or projects changed.

These tests commit (transaction=True): the cache is only written outside transactions,
and generations move on commit. The SQLite pass has no Redis: the process's own cache
stands in for it here, which is enough for one process.
"""

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from accounts import services as account_services
from accounts.models import TenantRole
from projects import services as project_services
from projects.models import Project, ProjectRole, Visibility
from projects.permissions import ACCESS_GENERATION, access_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def shared_access_cache(settings):
    settings.GANTRY_ACCESS_CACHE = True


def fresh(user):
    """The user as the next request loads it: nothing kept on the object."""
    return get_user_model().objects.get(pk=user.pk)


def visible(user):
    return set(Project.objects.visible_to(fresh(user)).values_list("name", flat=True))


def test_a_second_request_reads_no_roles_from_the_database(member, project):
    first = access_of(fresh(member))
    user = fresh(member)
    with CaptureQueriesContext(connection) as queries:
        again = access_of(user)
    assert again == first and project.pk in again.visible_projects
    assert len(queries) == 0


def test_without_the_setting_every_request_reads_the_database(settings, member, project):
    settings.GANTRY_ACCESS_CACHE = False
    access_of(fresh(member))
    user = fresh(member)
    with CaptureQueriesContext(connection) as queries:
        access_of(user)
    assert len(queries) == 3


def test_joining_and_leaving_a_tenant_shows_at_once(owner, member, outsider, project):
    assert visible(outsider) == set()
    membership = account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=outsider, role="member")
    assert visible(outsider) == {"Vision"}
    account_services.TENANT_MEMBERS.remove(actor=owner, member=membership)
    assert visible(outsider) == set()


def test_role_changes_show_at_once(owner, member, project):
    assert access_of(fresh(member)).tenant_roles[project.tenant_id] == TenantRole.MEMBER
    membership = member.memberships.get(tenant=project.tenant)
    account_services.TENANT_MEMBERS.change_role(actor=owner, member=membership, role=TenantRole.ADMIN)
    assert access_of(fresh(member)).tenant_roles[project.tenant_id] == TenantRole.ADMIN


def test_private_projects_and_project_members(owner, member, project):
    assert visible(member) == {"Vision"}
    project_services.update_project(actor=owner, project=project, visibility=Visibility.PRIVATE)
    assert visible(member) == set()
    added = project_services.add_project_member(
        actor=owner, project=project, user=member, role=ProjectRole.DEVELOPER
    )
    assert visible(member) == {"Vision"}
    assert access_of(fresh(member)).project_roles == {project.pk: ProjectRole.DEVELOPER}
    project_services.PROJECT_MEMBERS.remove(actor=owner, member=added)
    assert visible(member) == set()


def test_new_and_deleted_projects(owner, member, project):
    assert visible(member) == {"Vision"}
    project_services.create_project(actor=owner, tenant=project.tenant, name="Speech", slug="speech")
    assert visible(member) == {"Vision", "Speech"}
    project_services.delete_project(actor=owner, project=project)
    assert visible(member) == {"Speech"}


def test_a_deleted_tenant_takes_its_memberships_along(owner, member, project):
    assert visible(member) == {"Vision"}
    account_services.delete_tenant(actor=owner, tenant=project.tenant)
    assert access_of(fresh(member)).tenant_roles == {}
    assert visible(member) == set()


def test_a_rolled_back_change_is_never_cached(owner, outsider, project):
    with pytest.raises(RuntimeError), transaction.atomic():
        account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=outsider, role="member")
        assert visible(outsider) == {"Vision"}  # the transaction sees its own change
        raise RuntimeError("roll back")
    assert visible(outsider) == set()


def test_a_lost_generation_trusts_no_entry(member, project):
    """Were the generation evicted, entries made under the old one must not come back."""
    assert visible(member) == {"Vision"}  # cached under the current generation
    cache.delete(ACCESS_GENERATION)
    # A change the signals did not see, so only the lost generation can hide the entry.
    Project.objects.filter(pk=project.pk).update(visibility=Visibility.PRIVATE)
    assert visible(member) == set()


def test_tenant_names_for_the_switcher_follow_renames(owner, member, tenant):
    assert access_of(fresh(member)).tenants == [(tenant.pk, "Lab A")]
    account_services.update_tenant(actor=owner, tenant=tenant, name="Lab Alpha")
    assert access_of(fresh(member)).tenants == [(tenant.pk, "Lab Alpha")]
