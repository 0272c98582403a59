"""Deleting a project whose jobs ran from code snapshots: the snapshots go with it, as
its jobs do, and what they held stops counting against the tenant's storage."""

import pytest
from django.urls import reverse

from datasets.services.quotas import tenant_usage
from jobs.models import Job
from jobs.services.submit import submit_job
from snapshots import services
from snapshots.models import CodeSnapshot, SnapshotFile
from tests.accounts.test_admin import lab_admin  # noqa: F401 (a fixture)
from tests.snapshots.builders import make_snapshot, manifest

pytestmark = pytest.mark.django_db


def _project_with_code(owner, project):
    """A job that ran from a ready snapshot, and a second snapshot still uploading (its
    missing file reserved in the quota)."""
    snapshot = make_snapshot(owner, project, {"train.py": b"print('hi')\n"})
    submit_job(owner, project, command="python train.py", code_snapshot=snapshot)
    pending, missing = services.create_snapshot(owner, project, manifest({"big.bin": b"x" * 5000}))
    assert missing and tenant_usage(project.tenant) >= 5000
    return snapshot


def _gone(project, tenant):
    assert not CodeSnapshot.objects.exists() and not SnapshotFile.objects.exists()
    assert not Job.objects.filter(project_id=project.pk).exists()
    assert tenant_usage(tenant) == 0  # neither the stored file nor the reservation counts


def test_the_api_deletes_a_project_whose_job_ran_from_a_snapshot(api_for, owner, project):
    _project_with_code(owner, project)
    response = api_for(owner).delete(f"/api/v1/projects/{project.pk}/")
    assert response.status_code == 204, response.content
    _gone(project, project.tenant)


def test_the_delete_page_lists_the_snapshots_and_deletes_them(client_for, owner, project):
    _project_with_code(owner, project)
    client = client_for(owner)
    url = reverse("projects:project_delete", args=[project.pk])
    page = client.get(url)
    assert "<li>2 code snapshots</li>" in page.content.decode()
    assert "<li>1 jobs</li>" in page.content.decode()
    response = client.post(url, {"confirm": project.slug})
    assert response.status_code == 302, response.content
    _gone(project, project.tenant)


def test_a_lab_administrator_deletes_it_in_the_admin(client, lab_admin, owner, project):  # noqa: F811
    """Snapshots are read-only in the admin, which refused the project's delete for them."""
    _project_with_code(owner, project)
    url = reverse("admin:projects_project_delete", args=[project.pk])
    page = client.get(url).content.decode()
    assert "Are you sure you want to delete" in page and "code #" in page
    assert client.post(url, {"post": "yes"}).status_code == 302
    _gone(project, project.tenant)


def test_a_snapshot_a_job_ran_from_still_cannot_be_deleted_alone(owner, project):
    from django.db.models import RestrictedError

    snapshot = _project_with_code(owner, project)
    with pytest.raises(RestrictedError):
        snapshot.delete()
    assert CodeSnapshot.objects.filter(pk=snapshot.pk).exists()
