"""The cluster page's usage bars and counts, and quotas set below what a tenant uses."""

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from jobs.compute import reset_backends
from jobs.services.submit import submit_job
from scheduling.admission import admission_pass
from scheduling.services import set_tenant_quota

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def four_gpus(settings):
    # No GPU exists here: the local backend reports four for admission's bookkeeping only.
    settings.GANTRY_LOCAL_FAKE_GPUS = 4
    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 16384
    reset_backends()
    yield
    reset_backends()


def run_jobs(owner, project, *gpus):
    jobs = [
        submit_job(owner, project, command="python -c pass", gpus=g, memory_mb=256)
        for g in gpus
    ]
    admission_pass()
    return jobs


def test_a_quota_below_current_usage_is_saved_with_a_warning(client_for, owner, tenant, project):
    run_jobs(owner, project, 3)
    client = client_for(owner)
    response = client.post(
        reverse("scheduling:quota_edit", args=[tenant.pk]),
        {"guaranteed_gpus": 1, "borrow_limit_gpus": 0, "max_jobs": 0, "weight": 1},
    )
    assert response.status_code == 302
    warnings = [m.message for m in get_messages(response.wsgi_request) if m.level_tag == "warning"]
    assert warnings == [
        "Lab A uses 3 GPUs now, more than its new limit of 1: running jobs keep running; "
        "new ones wait until usage drops.",
        "Lab A runs 1 jobs now, more than its new limit of 0.",
    ]
    assert tenant.quota.guaranteed_gpus == 1


def test_the_overview_shows_usage_against_guarantee_and_borrow_limit(
    client_for, owner, tenant, project, django_assert_max_num_queries
):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=1, borrow_limit_gpus=2)
    run_jobs(owner, project, 2, 2)  # one runs on 1 own + 1 borrowed GPU, one waits
    client = client_for(owner)
    # 13: one of them counts the Kubernetes endpoints' replicas (endpoints.usage.open_deployments).
    with django_assert_max_num_queries(13):
        page = client.get(reverse("scheduling:overview"))
    row = page.context["rows"][0]
    assert row["usage"] == {
        "gpus": 2, "cpus": 1, "memory_mb": 256, "jobs": 1, "queued": 1,
        "services": {"gpus": 0, "cpus": 0, "memory_mb": 0, "replicas": 0},  # no endpoints
    }  # fmt: skip
    assert row["limit"] == 3
    widths = [width for width, _, _ in row["bar"]["segments"]]
    assert widths == [33.3, 33.3, 0, 33.3]
    html = page.content.decode()
    assert "2 in use · 1 guaranteed · may borrow 2 more (limit 3)" in html
    assert reverse("scheduling:tenant_queue", args=[tenant.pk]) in html
    assert page.context["cluster_gpus"] == 4


def test_a_tenant_without_a_quota_is_shown_as_best_effort(client_for, owner, tenant):
    page = client_for(owner).get(reverse("scheduling:overview"))
    assert "no quota: best effort" in page.content.decode()
    assert page.context["rows"][0]["limit"] == 4
