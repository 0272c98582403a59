"""A notebook job end to end: a real JupyterLab started by the local backend, reached
only through the notebook origin (interactive/origin.py) with a ticket from Gantry."""

import os
import time

import pytest

from interactive import proxy
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from tests.interactive.notebooks import Browser, OriginServer
from tests.jobs.conftest import wait_for

pytestmark = pytest.mark.slow


def test_notebook_job_serves_jupyterlab_to_who_may_exec(
    running_jobs, settings, owner, member, outsider, project
):
    from django.test import Client

    job = submit_job(owner, project, kind="notebook", name="explore")
    wait_for(job, "running", "failed")
    assert job.state == "running", job.state_reason
    target = proxy.resolve_target(job)
    token = target.token
    # JupyterLab listens on a Unix socket in its workdir, owned by the job's user.
    assert target.uds == os.path.join(job.worker_set.get().workdir, ".notebook.sock")
    assert target.base_url == f"/jobs/{job.pk}/lab/"

    def signed_in(user):
        client = Client()
        client.force_login(user)
        return client

    with OriginServer() as origin:
        settings.GANTRY_NOTEBOOK_ORIGIN = origin.origin_template
        browser = Browser(origin.port, signed_in(owner))
        browser.enter(job.pk, "lab/tree")
        lab = f"/jobs/{job.pk}/lab/"
        deadline = time.monotonic() + 90
        while True:  # JupyterLab takes a few seconds to listen after it starts
            response = browser.request("GET", job.pk, lab + "lab")
            if response.status_code == 200 or time.monotonic() > deadline:
                break
            assert response.status_code == 503, response.status_code
            assert response.headers["retry-after"] == "2" and "reloads by itself" in response.text
            time.sleep(0.5)
        assert response.status_code == 200
        assert "JupyterLab" in response.text
        assert token not in response.text

        # A tenant member views the project, but may not exec in its notebooks.
        viewer = Browser(origin.port, signed_in(member))
        start = viewer.request("GET", job.pk, lab + "lab")
        assert start.status_code == 302
        ticket_page = start.headers["location"].split("/", 3)[3]
        assert viewer.gantry.get("/" + ticket_page).status_code == 403
        assert viewer.request("GET", job.pk, lab + "api/status").status_code == 403
        outsider_ = signed_in(outsider).get(f"/jobs/{job.pk}/notebook/")
        assert outsider_.status_code == 404

    cancel_job(owner, job)
    wait_for(job, "cancelled")
    assert proxy.resolve_target(job) is None
