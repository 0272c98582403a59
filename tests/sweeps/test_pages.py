"""The sweep pages and API: what a user sees and may do (owner, viewer, outsider)."""

import json

from jobs.states import JobState
from sweeps.controller import control_sweep
from sweeps.models import Sweep, SweepState
from tests.sweeps.conftest import DOC, end, report, run


def finished_sweep(make_sweep):
    """Two trials: one complete (0.9), one pruned-like failure; the budget spent."""
    sweep = make_sweep(budget={"trials": 2})
    control_sweep(sweep.pk)
    good, bad = (t.job for t in sweep.trials.order_by("number"))
    run(good)
    report(good, "val_accuracy", 0.5, 0.9)
    end(good, JobState.SUCCEEDED)
    run(bad)
    end(bad, JobState.FAILED, "exit code 1: out of memory")
    control_sweep(sweep.pk)
    sweep.refresh_from_db()
    return sweep


def test_the_sweep_page_shows_the_best_trial_its_actions_and_every_trial(client_for, owner, make_sweep):
    sweep = finished_sweep(make_sweep)
    best = sweep.trials.get(number=0)
    page = client_for(owner).get(sweep.get_absolute_url()).content.decode()
    assert f'<strong data-best-objective>{0.9}' in page
    assert f"/jobs/{best.job_id}/register-model/" in page, "register best as model"
    assert f"/jobs/{best.job_id}/clone/" in page, "clone best as a job"
    assert "job failed: exit code 1: out of memory" in page
    assert 'id="sweep-data"' in page and 'id="parallel-chart"' in page and 'id="objective-chart"' in page
    assert "budget spent: 2 of 2 trials finished" in page


def test_a_viewer_sees_the_sweep_without_its_actions_and_an_outsider_gets_404(
    client_for, member, outsider, make_sweep, project
):
    sweep = finished_sweep(make_sweep)
    page = client_for(member).get(sweep.get_absolute_url()).content.decode()
    assert "register-model" not in page and "/clone/" not in page
    assert client_for(member).get(f"/projects/{project.pk}/sweeps/new/").status_code == 403
    assert client_for(outsider).get(sweep.get_absolute_url()).status_code == 404


def test_the_list_page_reads_a_fixed_number_of_queries(client_for, owner, make_sweep, django_assert_max_num_queries):
    for _ in range(3):
        make_sweep()
    client = client_for(owner)
    with django_assert_max_num_queries(15):
        page = client.get("/sweeps/").content.decode()
    assert page.count("digits</a>") == 3
    assert "New sweep" in page


def test_the_form_refuses_bad_yaml_with_its_line_and_creates_nothing(client_for, owner, project):
    response = client_for(owner).post(f"/projects/{project.pk}/sweeps/new/", {"source": "name: x\nparameters: [\n"})
    assert response.status_code == 400
    assert "Not valid YAML or JSON at line" in response.content.decode()
    assert not Sweep.objects.exists()


def test_the_form_starts_a_sweep_from_yaml(client_for, owner, project, settings):
    settings.GANTRY_LOCAL_CPUS = 8
    source = "\n".join(f"{key}: {json.dumps(value)}" for key, value in DOC.items())
    response = client_for(owner).post(f"/projects/{project.pk}/sweeps/new/", {"source": source})
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == sweep.get_absolute_url()
    assert sweep.space["lr"]["type"] == "loguniform" and sweep.created_by == owner


def test_the_api_creates_lists_shows_and_stops_a_sweep(api_for, owner, project, settings):
    settings.GANTRY_LOCAL_CPUS = 8
    api = api_for(owner)
    created = api.post("/api/v1/sweeps/", {"project": project.pk, "spec": DOC}, format="json")
    assert created.status_code == 201, created.json()
    sweep_id = created.json()["id"]
    control_sweep(sweep_id)
    detail = api.get(f"/api/v1/sweeps/{sweep_id}/").json()
    assert len(detail["trials"]) == 2 and detail["trials"][0]["params"]["lr"] > 0
    assert [s["id"] for s in api.get("/api/v1/sweeps/").json()["results"]] == [sweep_id]
    stopped = api.post(f"/api/v1/sweeps/{sweep_id}/stop/")
    assert stopped.status_code == 200 and stopped.json()["state"] == SweepState.STOPPED
    again = api.post(f"/api/v1/sweeps/{sweep_id}/stop/")
    assert again.status_code == 400 and "already ended" in json.dumps(again.json())


def test_the_api_refuses_a_bad_space_with_the_field_and_a_viewer_with_403(api_for, owner, member, project):
    bad = {**DOC, "parameters": {"lr": {"type": "uniform", "low": 2, "high": 1}}}
    response = api_for(owner).post("/api/v1/sweeps/", {"project": project.pk, "spec": bad}, format="json")
    assert response.status_code == 400
    assert "low must be below high" in json.dumps(response.json())
    response = api_for(member).post("/api/v1/sweeps/", {"project": project.pk, "spec": DOC}, format="json")
    assert response.status_code == 403
    assert not Sweep.objects.exists()
