"""Submitting jobs: validation in the service, the form and the API; lists; cancel and retry."""

import pytest
from django.urls import reverse

from accounts import services as account_services
from accounts.models import Membership
from interactive.services import notebook_target
from jobs.forms import parse_pairs
from jobs.models import Job, JobScheduling
from jobs.services.submit import submit_job
from jobs.states import transition


@pytest.fixture(autouse=True)
def _small_machine(job_settings):
    """A 4-CPU, 8 GiB machine without GPUs, whatever runs the tests."""


def test_owner_submits_a_train_job_from_the_form(client_for, owner, project):
    client = client_for(owner)
    url = reverse("jobs:job_add", args=[project.pk])
    assert client.get(url + "?kind=distributed").status_code == 200
    response = client.post(
        url,
        {
            "kind": "train",
            "command": "python train.py",
            "parameters": "lr=0.001\nepochs=3\nfast=true\nname=resnet",
            "env": "SEED=1",
            "gpus": 0,
            "cpus": 1,
            "memory_mb": 512,
            "max_retries": 2,
            "priority": 0,
        },
    )
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == job.get_absolute_url()
    assert job.parameters == {"lr": 0.001, "epochs": 3, "fast": True, "name": "resnet"}
    assert job.env == {"SEED": "1"}
    assert job.state == "queued" and job.state_reason == "waiting for admission"
    assert client.get(job.get_absolute_url()).status_code == 200


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"command": ""}, "command"),
        ({"command": "python 'unbalanced"}, "command"),
        ({"parameters": "not a pair"}, "parameters"),
        ({"parameters": "9lives=1"}, "parameters"),
        ({"env": "GANTRY_JOB_ID=3"}, "env"),
        ({"gpus": 2}, "gpus"),
        ({"cpus": 64}, "cpus"),
        ({"runtime": "/no/such/python"}, "runtime"),
        ({"runtime": "relative/python"}, "runtime"),
        # Beyond SQLite's integers: Django's `__in` lookup raised OverflowError (a 500).
        ({"dataset_versions": [str(2**70)]}, "dataset_versions"),
    ],
)
def test_bad_form_input_shows_field_errors_and_creates_nothing(
    client_for, owner, project, changes, field
):
    data = {
        "kind": "train",
        "command": "python x.py",
        "gpus": 0,
        "cpus": 1,
        "memory_mb": 512,
        "max_retries": 0,
        "priority": 0,
        **changes,
    }
    response = client_for(owner).post(reverse("jobs:job_add", args=[project.pk]), data)
    assert response.status_code == 400
    assert response.context["form"].errors[field]
    assert not Job.objects.exists()


def test_api_submit_validates_and_creates(api_for, owner, project):
    api = api_for(owner)
    bad = api.post(
        "/api/v1/jobs/",
        {
            "project": project.pk,
            "kind": "train",
            "command": "python x.py",
            "parameters": {"lr": [1, 2]},
            "workers": 2,
            "gpus": 1,
        },
        format="json",
    )
    assert bad.status_code == 400
    assert set(bad.json()) >= {"parameters", "workers", "gpus"}
    assert not Job.objects.exists()

    missing = api.post("/api/v1/jobs/", {"project": project.pk}, format="json")
    assert missing.status_code == 400 and "command" in missing.json()

    ok = api.post(
        "/api/v1/jobs/",
        {
            "project": project.pk,
            "kind": "distributed",
            "workers": 2,
            "command": "python ddp.py",
            "parameters": {"lr": 0.1},
        },
        format="json",
    )
    assert ok.status_code == 201, ok.content
    job = Job.objects.get()
    assert ok.json()["id"] == job.pk and job.workers == 2
    assert job.worker_set.count() == 2


def test_member_may_not_submit(api_for, member, project):
    response = api_for(member).post(
        "/api/v1/jobs/", {"project": project.pk, "command": "python x.py"}, format="json"
    )
    assert response.status_code == 403


def test_outsider_cannot_submit_to_a_project_they_cannot_see(api_for, outsider, project):
    response = api_for(outsider).post(
        "/api/v1/jobs/", {"project": project.pk, "command": "python x.py"}, format="json"
    )
    # A field error, as for an id that does not exist (it was 404, which told the two
    # apart); tests/core/test_related_ids.py checks the answers are identical.
    assert response.status_code == 400 and "project" in response.json()
    assert not Job.objects.exists()


def test_cancel_a_queued_job_and_retry_it(client_for, owner, project):
    job = submit_job(owner, project, command="python x.py")
    client = client_for(owner)
    response = client.post(reverse("jobs:job_cancel", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled" and job.state_reason == f"cancelled by {owner.username}"

    response = client.post(reverse("jobs:job_retry", args=[job.pk]))
    new = Job.objects.exclude(pk=job.pk).get()
    assert response.url == new.get_absolute_url()
    assert new.cloned_from == job and new.command == job.command and new.state == "queued"


def test_clone_and_edit_prefills_the_form(client_for, owner, project):
    job = submit_job(owner, project, command="python x.py", parameters={"lr": 0.5})
    client = client_for(owner)
    page = client.get(reverse("jobs:job_clone", args=[job.pk]))
    assert page.context["form"].initial["parameters"] == "lr=0.5"
    client.post(
        reverse("jobs:job_clone", args=[job.pk]),
        {
            "command": "python y.py",
            "parameters": "lr=0.1",
            "gpus": 0,
            "cpus": 1,
            "memory_mb": 512,
            "max_retries": 0,
            "priority": 0,
        },
    )
    clone = Job.objects.get(cloned_from=job)
    assert clone.command == "python y.py" and clone.parameters == {"lr": 0.1}


def test_transitions_are_guarded_against_races(owner, project):
    job = submit_job(owner, project, command="python x.py")
    stale = Job.objects.get(pk=job.pk)
    assert transition(job, "admitted", "first")
    assert not transition(stale, "admitted", "second")  # read as queued, no longer queued
    assert not transition(job, "succeeded", "not allowed from admitted")
    assert list(job.events.values_list("to_state", flat=True)) == ["queued", "admitted"]


def test_queued_jobs_say_why_they_wait(owner, project):
    big = submit_job(owner, project, command="python x.py", cpus=4)
    small = submit_job(owner, project, command="python x.py", cpus=1)
    from scheduling.admission import admission_pass

    assert admission_pass() == [big]
    small.refresh_from_db()
    assert small.state == "queued"
    assert small.state_reason == "waiting for 1 CPU: 0 free on this machine"
    third = submit_job(owner, project, command="python x.py", cpus=1)
    admission_pass()
    third.refresh_from_db()
    assert third.state_reason == "waiting for 1 CPU: 0 free on this machine"
    assert (small.queue_position, Job.objects.get(pk=third.pk).queue_position) == (1, 2)


def test_parameters_are_typed():
    assert parse_pairs("a=1\nb=1.5\nc=false\nd=x=y\n# note", infer=True) == {
        "a": 1,
        "b": 1.5,
        "c": False,
        "d": "x=y",
    }


def test_job_list_query_count_does_not_grow_with_the_page(
    client_for, api_for, owner, project, django_assert_max_num_queries
):
    other = account_services.create_tenant(actor=owner, name="Lab C", slug="lab-c")
    from projects import services as project_services

    second = project_services.create_project(actor=owner, tenant=other, name="P", slug="p")
    for i in range(3):
        submit_job(owner, project if i % 2 else second, command="python x.py")
    client = client_for(owner)
    api = api_for(owner)
    with django_assert_max_num_queries(12) as small_page:
        assert client.get(reverse("jobs:job_list")).status_code == 200
    with django_assert_max_num_queries(12) as small_api:
        assert api.get("/api/v1/jobs/").status_code == 200
    for i in range(30):
        submit_job(owner, project if i % 2 else second, command="python x.py")
    with django_assert_max_num_queries(len(small_page.captured_queries)):
        assert client.get(reverse("jobs:job_list")).status_code == 200
    with django_assert_max_num_queries(len(small_api.captured_queries)):
        response = api.get("/api/v1/jobs/?status=queued")
    assert response.json()["count"] == 33


def test_job_list_filters(client_for, owner, project):
    submit_job(owner, project, command="python a.py", name="alpha")
    submit_job(owner, project, kind="notebook", name="lab")
    client = client_for(owner)
    page = client.get(reverse("jobs:job_list") + "?kind=notebook")
    assert [row["name"] for row in page.context["rows"]] == ["lab"]
    partial = client.get(reverse("jobs:job_list") + "?q=alpha", HTTP_HX_REQUEST="true")
    assert b"alpha" in partial.content and b"<html" not in partial.content


def test_job_table_rows_say_what_the_models_say(client_for, owner, member, project):
    """The table's rows are built from plain values (jobs.views.job_row): each cell as
    the model would print it (names as User.__str__, projects as Project.__str__)."""
    membership = Membership.objects.get(tenant=project.tenant, user=member)
    account_services.TENANT_MEMBERS.change_role(actor=owner, member=membership, role="admin")
    member.first_name, member.last_name = "Max", "Planck"
    member.save()
    by_owner = submit_job(owner, project, name="plain", command="python a.py")
    Job.objects.filter(pk=by_owner.pk).update(workers=2, gpus=1)
    by_member = submit_job(member, project, name="named", command="python b.py")
    JobScheduling.objects.create(job=by_member, queue_position=3)
    rows = {row["name"]: row for row in client_for(owner).get(reverse("jobs:job_list")).context["rows"]}
    plain, named = rows["plain"], rows["named"]
    assert (plain["created_by"], named["created_by"]) == (str(owner), "Max Planck")
    assert plain["project"] == str(project) and plain["project_url"] == project.get_absolute_url()
    assert plain["url"] == by_owner.get_absolute_url()
    assert plain["resources"] == "2 × 1 GPU · 1 CPU · 1024 MiB"
    assert (plain["state_label"], plain["state_badge"]) == (by_owner.get_state_display(), by_owner.state_badge)
    assert named["queue_position"] == 3


def test_notebook_target_is_none_until_the_notebook_runs(owner, project):
    job = submit_job(owner, project, kind="notebook")
    assert job.command == ""
    assert notebook_target(job) is None
    from jobs.compute import get_backend

    worker = job.worker_set.get()
    worker.notebook_token = "secret"
    argv = get_backend().command(job, worker)
    assert argv[1:3] == ["-m", "jupyterlab"]
    assert f"--ServerApp.base_url=/jobs/{job.pk}/lab/" in argv
    # A Unix socket in its workdir, never a port (issue 18: a network namespace per job).
    assert "--ServerApp.sock=.notebook.sock" in argv
    assert not [a for a in argv if a.startswith(("--ServerApp.port", "--ServerApp.ip"))]
