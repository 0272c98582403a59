"""A notebook job end to end: a real JupyterLab under the executor, reached only
through Gantry's proxy at /jobs/<id>/lab/."""

import time

import pytest
from django.test import AsyncClient

from jobs import services
from tests.jobs.conftest import wait_for
from tests.jobs.test_proxy import fetch, logged_in

pytestmark = pytest.mark.slow


def test_notebook_job_serves_jupyterlab_to_members_only(running_jobs, owner, member, outsider, project):
    job = services.submit_job(owner, project, kind="notebook", name="explore")
    wait_for(job, "running", "failed")
    assert job.state == "running", job.state_reason
    host, port, token, base_url = services.notebook_target(job)
    assert host == "127.0.0.1" and base_url == f"/jobs/{job.pk}/lab/"

    lab = f"/jobs/{job.pk}/lab/"
    client = logged_in(owner)
    deadline = time.monotonic() + 90
    while True:  # JupyterLab takes a few seconds to listen after it starts
        response, body = fetch(client, "get", lab + "lab")
        if response.status_code == 200 or time.monotonic() > deadline:
            break
        assert response.status_code == 502, response.status_code
        time.sleep(0.5)
    assert response.status_code == 200
    assert b"JupyterLab" in body
    assert token.encode() not in body

    # A tenant member views the project, so may use its notebooks' pages.
    status, _ = fetch(logged_in(member), "get", lab + "api/status")
    assert status.status_code == 200
    denied, _ = fetch(logged_in(outsider), "get", lab + "lab")
    assert denied.status_code == 404
    anonymous, _ = fetch(AsyncClient(), "get", lab + "lab")
    assert anonymous.status_code == 302

    services.cancel_job(owner, job)
    wait_for(job, "cancelled")
    assert services.notebook_target(job) is None
