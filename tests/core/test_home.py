"""The home page works for you: your jobs live, results, GPUs against quota, notebooks,
and a new tenant's next steps. Only what you may see; an outsider's jobs never appear."""

import re

import pytest
from django.urls import reverse

from datasets.services.catalog import create_dataset
from jobs.services.ingestion import ingest_metrics
from jobs.services.submit import submit_job
from jobs.states import transition
from projects import services as project_services
from scheduling.services import set_tenant_quota

pytestmark = pytest.mark.django_db

HOME = "/"


def run(job, to="running"):
    transition(job, "admitted", "test")
    transition(job, "starting", "test")
    transition(job, "running", "running")
    if to != "running":
        transition(job, to, f"ended {to}")
    return job


def test_home_shows_my_running_and_queued_jobs_with_their_state(client_for, owner, project):
    running = run(
        submit_job(owner, project, name="resnet-sweep", command="python train.py", gpus=0)
    )
    queued = submit_job(owner, project, name="waiting-one", command="python train.py")
    page = client_for(owner).get(HOME).content.decode()
    assert f"#{running.pk} resnet-sweep" in page
    assert f"#{queued.pk} waiting-one" in page
    assert 'data-state="running"' in page and 'data-state="queued"' in page


def test_an_outsiders_running_job_is_not_on_my_home(
    client_for, owner, project, outsider, other_project
):
    run(submit_job(outsider, other_project, name="outsider-secret", command="python x.py"))
    page = client_for(owner).get(HOME).content.decode()
    assert "outsider-secret" not in page
    # Nor on theirs the other way round; and the live partial says the same.
    mine = run(submit_job(owner, project, name="olivias-run", command="python x.py"))
    partial = client_for(outsider).get(HOME + "?part=live", HTTP_HX_REQUEST="true").content.decode()
    assert "olivias-run" not in partial and f'data-job="{mine.pk}"' not in partial
    assert "outsider-secret" in partial


def test_a_teammates_job_is_not_listed_as_mine(client_for, owner, member, project):
    project_services.PROJECT_MEMBERS.add(actor=owner, place=project, user=member, role="developer")
    run(submit_job(member, project, name="maxs-job", command="python x.py"))
    assert "maxs-job" not in client_for(owner).get(HOME).content.decode()


def test_the_live_partial_follows_a_job_from_queued_to_its_result(client_for, owner, project):
    client = client_for(owner)
    job = submit_job(owner, project, name="digits", command="python train.py")

    def live():
        response = client.get(HOME + "?part=live", HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        html = response.content.decode()
        assert "<html" not in html  # the panel alone, not the page
        return html

    assert re.search(rf'data-job="{job.pk}".*?data-state="queued"', live(), re.S)
    run(job)
    ingest_metrics(job, 0, [{"seq": 1, "name": "loss", "step": 1, "value": 2.5}])
    ingest_metrics(job, 0, [{"seq": 2, "name": "accuracy", "step": 1, "value": 0.912345678901}])
    html = live()
    assert 'id="home-active-jobs"' in html and 'data-state="running"' in html
    transition(job, "succeeded", "exit code 0")
    html = live()
    results = html.split('id="home-results"')[1]
    assert f'data-job="{job.pk}"' in results and 'data-state="succeeded"' in results
    # The key metric is the last one logged, with four significant digits, not sixteen.
    assert "accuracy 0.9123" in results and "0.912345678901<" not in results
    assert "Nothing of yours is running or waiting" in html


def test_gpus_in_use_against_the_tenants_quota(client_for, owner, tenant, project, settings):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=2, borrow_limit_gpus=2)
    job = submit_job(owner, project, name="gpu-job", command="python x.py")
    # The local backend here has no GPU: the job's row says what it holds once running.
    type(job).objects.filter(pk=job.pk).update(gpus=1, workers=2)
    job.refresh_from_db()
    run(job)
    html = client_for(owner).get(HOME).content.decode()
    gpus = html.split('id="home-gpus"')[1].split("</div></div>")[0]
    assert 'data-gpus-in-use="2"' in gpus
    assert "2 / 4" in gpus and "2 guaranteed, up to 4" in gpus


def test_a_tenant_without_quota_says_best_effort(client_for, owner, project):
    html = client_for(owner).get(HOME).content.decode()
    assert "No GPU quota: best effort" in html


def test_notebooks_i_left_running_have_open_and_a_confirmed_stop(client_for, owner, project):
    notebook = run(submit_job(owner, project, name="explore", kind="notebook"))
    html = client_for(owner).get(HOME).content.decode()
    notebooks = html.split('id="home-notebooks"')[1]
    assert reverse("notebook_open", args=[notebook.pk]) in notebooks
    assert f'data-bs-target="#stop-notebook-{notebook.pk}"' in notebooks
    assert f'action="{reverse("jobs:job_cancel", args=[notebook.pk])}"' in notebooks
    assert "unsaved notebook changes and running kernels are lost" in notebooks
    # A notebook is not also listed among the jobs.
    assert (
        f'data-job="{notebook.pk}"'
        not in html.split('id="home-active-jobs"')[1].split("</table>")[0]
    )


def test_a_viewer_sees_no_stop_for_a_notebook_they_cannot_cancel(
    client_for, owner, member, project
):
    notebook = run(submit_job(owner, project, name="explore", kind="notebook"))
    html = client_for(member).get(HOME).content.decode()
    assert f"stop-notebook-{notebook.pk}" not in html  # not theirs: not on their home at all


def test_a_new_tenant_gets_a_checklist_that_ticks_itself(client_for, owner, tenant):
    client = client_for(owner)

    def steps():
        html = client.get(HOME).content.decode()
        return dict(re.findall(r'data-step="(\w+)" data-done="(\w+)"', html)), html

    done, html = steps()
    assert done == {"project": "no", "data": "no", "job": "no"}
    assert reverse("projects:project_add", args=[tenant.pk]) in html

    project = project_services.create_project(
        actor=owner, tenant=tenant, name="Vision", slug="vision"
    )
    done, html = steps()
    assert done == {"project": "yes", "data": "no", "job": "no"}
    assert reverse("datasets:dataset_add", args=[project.pk]) in html

    dataset = create_dataset(owner, project, name="digits")
    done, html = steps()
    assert done["data"] == "no"  # a dataset without files is not data yet
    assert reverse("datasets:dataset_upload", args=[dataset.pk]) in html
    from datasets.services.versions import create_version

    create_version(owner, dataset, parent=None, new_files={}, source="upload")
    done, html = steps()
    assert done == {"project": "yes", "data": "yes", "job": "no"}
    assert reverse("jobs:job_add", args=[project.pk]) in html

    submit_job(owner, project, name="first", command="python examples/train_digits.py")
    done, html = steps()
    assert done == {} and 'id="home-checklist"' not in html


def test_home_queries_do_not_grow_with_jobs(
    client_for, owner, project, django_assert_max_num_queries
):
    client = client_for(owner)
    for i in range(3):
        run(submit_job(owner, project, name=f"j{i}", command="python x.py"), to="succeeded")
    client.get(HOME)
    with django_assert_max_num_queries(30) as few:
        client.get(HOME)
    for i in range(12):
        run(
            submit_job(owner, project, name=f"k{i}", command="python x.py"),
            to="succeeded" if i % 2 else "running",
        )
    with django_assert_max_num_queries(len(few.captured_queries)):
        client.get(HOME)


def test_the_projects_list_says_which_tenant_it_shows(
    client_for, owner, tenant, project, make_user
):
    client = client_for(owner)
    from accounts import services as account_services

    second = account_services.create_tenant(actor=owner, name="Lab C", slug="lab-c")
    project_services.create_project(actor=owner, tenant=second, name="Audio", slug="audio")
    html = client.get(reverse("projects:project_list")).content.decode()
    assert "Projects in all your tenants · 2 projects" in html
    # With the switcher on one tenant, the list and its filter say so (not "All tenants").
    client.post(reverse("accounts:switch_tenant"), {"tenant": tenant.pk, "next": "/"})
    html = client.get(reverse("projects:project_list")).content.decode()
    assert "Projects in Lab A · 1 project<" in html
    assert f'<option value="{tenant.pk}" selected>Lab A</option>' in html
    assert "Audio" not in html.split('id="project-table"')[1]
    # Choosing "All tenants" in the filter shows them all again.
    html = client.get(reverse("projects:project_list") + "?tenant=").content.decode()
    assert "Projects in all your tenants · 2 projects" in html


def test_the_project_page_shows_its_datasets_and_models(client_for, owner, project):
    from modelhub.services import create_model

    client = client_for(owner)
    html = client.get(project.get_absolute_url()).content.decode()
    assert "No datasets yet" in html and "No models yet" in html
    assert reverse("datasets:dataset_add", args=[project.pk]) in html
    create_dataset(owner, project, name="digits")
    newest = create_dataset(owner, project, name="faces")
    model = create_model(owner, project, name="digit-cnn")
    html = client.get(project.get_absolute_url()).content.decode()
    datasets = html.split('id="project-datasets"')[1].split('id="project-models"')[0]
    assert 'data-count="2"' in datasets and newest.get_absolute_url() in datasets
    models = html.split('id="project-models"')[1].split("Jobs")[0]
    assert 'data-count="1"' in models and model.get_absolute_url() in models
