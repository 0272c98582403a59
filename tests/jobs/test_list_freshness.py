"""The job list is computed afresh on every request (no list cache): what admission
writes with raw SQL shows at once, and the ETag, computed from the body sent, changes
when the body does (If-None-Match gets 304 only for the body the client holds)."""

import pytest
from rest_framework.test import APIClient

from jobs.compute import reset_backends
from jobs.models import Job
from jobs.services.submit import submit_job
from scheduling.admission import admission_pass

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/?page_size=50"


@pytest.fixture(autouse=True)
def one_gpu(settings):
    settings.GANTRY_LOCAL_FAKE_GPUS = 1
    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 16384
    reset_backends()
    yield
    reset_backends()


def submit(owner, project, name, **spec):
    return submit_job(owner, project, name=name, command="python -c pass", gpus=1, memory_mb=256, **spec)


def rows(response):
    return {row["name"]: row for row in response.json()["results"]}


def test_the_list_shows_what_an_admission_pass_wrote_and_its_etag_moves(owner, project):
    api = APIClient()
    api.force_authenticate(owner)
    holder = submit(owner, project, "holder")
    waiting = submit(owner, project, "waiting")
    assert admission_pass() == [Job.objects.get(pk=holder.pk)]  # the one GPU is taken
    latest = submit(owner, project, "latest")

    before = api.get(URL)
    assert before.status_code == 200 and before["ETag"]
    assert rows(before)["latest"]["queue_position"] is None  # not yet explained
    assert rows(before)["waiting"]["queue_position"] == 1
    # The body the client holds is still current: 304, no body.
    assert api.get(URL, HTTP_IF_NONE_MATCH=before["ETag"]).status_code == 304

    admission_pass()  # writes reasons, positions and estimates with one raw statement
    stored = {
        job.name: (job.state_reason, job.queue_position, job.estimated_start_at)
        for job in Job.objects.filter(pk__in=[waiting.pk, latest.pk])
    }
    assert stored["latest"][1] == 2 and stored["waiting"][1] == 1 and stored["latest"][0]

    after = api.get(URL, HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200, "a 304 for a body that changed"
    assert after["ETag"] != before["ETag"]
    for name in ("latest", "waiting"):
        row = rows(after)[name]
        reason, position, eta = stored[name]
        assert (row["state_reason"], row["queue_position"]) == (reason, position)
        assert (row["estimated_start_at"] is None) == (eta is None)
    assert api.get(URL, HTTP_IF_NONE_MATCH=after["ETag"]).status_code == 304


def test_the_etag_is_the_bodys_not_the_users(owner, member, project):
    """Two callers who see different rows never share an ETag; the same rows, the same one."""
    submit(owner, project, "seen-by-both")
    owner_api, member_api = APIClient(), APIClient()
    owner_api.force_authenticate(owner)
    member_api.force_authenticate(member)
    first, again = owner_api.get(URL), owner_api.get(URL)
    assert first["ETag"] == again["ETag"]
    from projects import services as project_services

    hidden = project_services.create_project(
        actor=owner, tenant=project.tenant, name="Private", slug="private", visibility="private"
    )
    private = submit(owner, hidden, "owner-only")
    assert owner_api.get(URL)["ETag"] != member_api.get(URL)["ETag"]
    assert private.pk not in {row["id"] for row in member_api.get(URL).json()["results"]}
