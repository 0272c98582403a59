"""The design pass of issue 27 where the HTML alone shows it: labels, the audit log's typed
details, the quota table's figures, and the page head that lets dark mode follow the system."""

import pytest
from django.urls import reverse

from core import audit

pytestmark = pytest.mark.django_db


def test_quota_form_says_gpus_not_gpus_in_title_case(client_for, owner, tenant):
    html = (
        client_for(owner).get(reverse("scheduling:quota_edit", args=[tenant.pk])).content.decode()
    )
    assert "Guaranteed GPUs" in html and "GPU borrow limit" in html and "Max CPUs" in html
    assert "Gpus" not in html and "Guaranteed gpus" not in html


def test_audit_details_are_typed_key_values_not_python_dicts(client_for, owner, tenant):
    audit.record(
        owner,
        "job.submit",
        tenant,
        reason=None,
        resources={"gpus": 2, "memory_mb": 2048},
        retry=False,
        loss=0.30000000000000004,
    )
    html = client_for(owner).get(reverse("audit_list")).content.decode()
    details = html.split('class="audit-details')[1].split("</dl>")[0]
    assert "<dt>reason</dt><dd" in details and ">—</dd>" in details
    assert "None" not in details and "False" not in details and "{'" not in details
    assert "&quot;gpus&quot;: 2" in details  # JSON, readably
    assert ">no</dd>" in details and ">0.3</dd>" in details


def test_an_empty_audit_log_says_what_it_will_hold(client_for, outsider):
    html = (
        client_for(outsider)
        .get(reverse("audit_list") + "?action=nothing-like-this")
        .content.decode()
    )
    assert "Nothing recorded matches these filters." in html


def test_quota_table_shows_infinity_not_a_dangling_slash_without_a_quota(client_for, owner, tenant):
    html = client_for(owner).get(reverse("scheduling:overview")).content.decode()
    row = html.split("Quotas and usage")[1].split("</tr>", 2)[1]
    assert "0 / ∞" in row and "0 B / ∞" in row
    assert "0 / <" not in row


def test_every_page_loads_the_theme_script_before_the_styles_apply(client_for, owner):
    html = client_for(owner).get("/").content.decode()
    head = html.split("</head>")[0]
    assert '<script src="/static/gantry/theme.js"></script>' in head
    assert '<meta name="color-scheme" content="light dark">' in head
    assert "<script>" not in html  # CSP: no inline script


def test_job_page_shows_times_through_the_formatter(client_for, owner, project):
    from jobs.services.submit import submit_job

    job = submit_job(owner, project, name="long", command="python x.py", timeout_seconds=5400)
    html = client_for(owner).get(job.get_absolute_url()).content.decode()
    assert "1 h 30 min" in html and "5400 s" not in html
    assert (
        "<time datetime=" in html and "just now</time>" in html
    )  # submitted, with the time on hover
    assert "1.0 GiB memory" in html or "2.0 GiB memory" in html


def test_admin_job_and_quota_forms_say_gpus(client, make_user, owner, project, tenant):
    from jobs.services.submit import submit_job
    from scheduling.services import set_tenant_quota

    admin = make_user("root", is_staff=True, is_superuser=True)
    client.force_login(admin)
    job = submit_job(owner, project, name="j", command="python x.py")
    quota, _ = set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=1)
    html = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert "<label>GPUs:</label>" in html and "<label>CPUs:</label>" in html
    assert "Gpus" not in html
    html = client.get(
        reverse("admin:scheduling_tenantquota_change", args=[quota.pk])
    ).content.decode()
    assert "Guaranteed GPUs:</label>" in html and "GPU borrow limit:</label>" in html
    assert "Gpus" not in html and "Guaranteed gpus" not in html


def test_a_project_without_members_says_who_reaches_it(client_for, make_user, owner, tenant):
    from projects import services as project_services

    root = make_user("root", is_staff=True, is_superuser=True)
    # A superuser outside the tenant becomes no member of what they create.
    project = project_services.create_project(actor=root, tenant=tenant, name="Ops", slug="ops")
    html = (
        client_for(owner)
        .get(reverse("projects:project_members", args=[project.pk]))
        .content.decode()
    )
    assert "No project members yet: only the tenant's owners and admins" in html
    assert "Add someone to give them a project role." in html
