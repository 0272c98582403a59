"""The job page's live panel (templates/jobs/_job_live.html): what the page refetches with
HTMX when its websocket reports a state change. Each step of a job's life shows in it:
the queue note goes once admitted, placement appears, every timeline step is there, and
the outputs and "Register as model" come with the end (out-of-band swaps)."""

import hashlib
import io

import pytest

from jobs.models import Job
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from jobs.states import transition

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def live(client, job):
    response = client.get(f"/jobs/{job.pk}/", **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def test_the_live_panel_follows_a_job_from_queued_to_succeeded(client_for, owner, project):
    client = client_for(owner)
    job = submit_job(owner, project, name="mnist", command="python train.py")
    Job.objects.filter(pk=job.pk).update(state_reason="Queue: waiting for admission")
    job.refresh_from_db()

    queued = live(client, job)
    assert 'id="job-queue"' in queued and "waiting for admission" in queued
    assert "not placed yet" in queued
    assert 'hx-trigger="every 10s"' in queued  # polls while the job is not finished
    assert 'id="job-register"' not in queued and 'id="job-cancel"' in queued

    placement = {"hosts": {"0": "node-a"}, "gpus": {"0": [1]}, "cpus": {"0": [2, 3]}}
    transition(job, "admitted", "admitted on node-a", placement=placement)
    transition(job, "starting", "starting")
    transition(job, "running", "running")
    running = live(client, job)
    assert 'id="job-queue"' not in running and "waiting for admission" not in running
    assert "node-a" in running and "GPU 1" in running and "CPU slots 2, 3" in running
    for step in ("queued → admitted", "admitted → starting", "starting → running"):
        assert step in running
    assert 'id="job-timeline" class="list-group list-group-flush small" hx-swap-oob="true"' in running

    data = b"weights"
    store_artifact(job, 0, "model.pt", io.BytesIO(data), hashlib.sha256(data).hexdigest())
    transition(job, "succeeded", "exit code 0")
    done = live(client, job)
    assert "running → succeeded" in done
    assert 'id="job-outputs" hx-swap-oob="true"' in done and "model.pt" in done
    assert 'id="job-register"' in done and 'id="job-actions" class="d-flex gap-2" hx-swap-oob="true"' in done
    assert 'id="job-cancel"' not in done
    assert 'hx-trigger="every 10s"' not in done  # a finished job is not polled


def test_the_full_page_has_no_out_of_band_parts_and_cancel_asks_first(client_for, owner, project):
    job = submit_job(owner, project, name="nb", command="python train.py")
    page = client_for(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "hx-swap-oob" not in page
    # Cancel opens a dialog naming what is lost; only its button posts.
    assert 'data-bs-target="#job-cancel-dialog"' in page
    assert 'id="job-cancel-dialog"' in page and "are lost" in page
    form_start = page.index('id="job-cancel-dialog"')
    assert page.index(f'action="/jobs/{job.pk}/cancel/"') > form_start


def test_an_outsider_gets_404_for_the_live_panel(client_for, owner, outsider, project):
    job = submit_job(owner, project, name="mnist", command="python train.py")
    assert client_for(outsider).get(f"/jobs/{job.pk}/", **HTMX).status_code == 404


def test_the_live_panel_costs_a_few_queries_however_long_the_job(
    client_for, owner, project, django_assert_max_num_queries
):
    """It is fetched every 10 s by every open page of a running job: its queries do not
    grow with the timeline or the outputs."""
    client = client_for(owner)
    job = submit_job(owner, project, name="mnist", command="python train.py")
    transition(job, "admitted", "admitted", placement={"hosts": {"0": "node-a"}})
    transition(job, "starting", "starting")
    transition(job, "running", "running")
    live(client, job)  # warm the session and permission caches
    with django_assert_max_num_queries(12) as few:
        live(client, job)
    for i in range(20):
        data = f"file {i}".encode()
        store_artifact(job, 0, f"out/{i}.txt", io.BytesIO(data), hashlib.sha256(data).hexdigest())
    with django_assert_max_num_queries(len(few.captured_queries)):
        live(client, job)
