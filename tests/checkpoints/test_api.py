"""GET /api/v1/checkpoints/: complete checkpoints of the jobs a user may see, read-only."""

import pytest

from checkpoints.services import begin_checkpoint
from tests.checkpoints.builders import saved, sha
from tests.jobs.test_executor_api import launched

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _files(job_settings):
    pass


def test_lists_a_jobs_complete_checkpoints_with_their_files(owner, project, api_for):
    job, _ = launched(owner, project)
    other, _ = launched(owner, project, secret="x")
    saved(job, "step-1", step=1, metrics={"loss": 0.5}, files={"a": b"aa", "b/c": b"ccc"})
    saved(other, "step-9", step=9)
    begin_checkpoint(job, {"name": "pending", "files": [{"path": "w", "size": 1, "sha256": sha(b"w")}]})
    rows = api_for(owner).get(f"/api/v1/checkpoints/?job={job.pk}").json()["results"]
    assert [r["name"] for r in rows] == ["step-1"]
    assert rows[0]["metrics"] == {"loss": 0.5} and rows[0]["total_size"] == 5
    assert {f["path"] for f in rows[0]["files"]} == {"a", "b/c"}


def test_outsiders_see_nothing(owner, outsider, project, api_for):
    job, _ = launched(owner, project)
    checkpoint = saved(job)
    api = api_for(outsider)
    assert api.get("/api/v1/checkpoints/").json()["results"] == []
    assert api.get(f"/api/v1/checkpoints/{checkpoint.pk}/").status_code == 404


def test_the_list_costs_the_same_queries_for_many_checkpoints(owner, project, api_for, django_assert_max_num_queries):
    job, _ = launched(owner, project)
    for step in range(12):
        saved(job, f"step-{step}", step=step, files={"w": bytes([step]), "x": b"x"})
    api = api_for(owner)
    with django_assert_max_num_queries(8):
        rows = api.get("/api/v1/checkpoints/").json()["results"]
    assert len(rows) == 12
