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


def test_the_new_sweep_form_runs_its_sample_on_code_uploaded_for_it(client_for, owner, project, settings):
    """The page's own sample names examples/train_digits.py: with the examples/ folder picked
    as code (the form's upload box, or an earlier upload), every trial's job gets that code."""
    from sweeps.forms import EXAMPLE
    from tests.snapshots.builders import make_snapshot

    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 8192
    code = make_snapshot(owner, project, {"examples/train_digits.py": b"print('digits')\n"})
    client = client_for(owner)
    page = client.get(f"/projects/{project.pk}/sweeps/new/").content.decode()
    assert 'id="code-upload"' in page and f'data-project="{project.pk}"' in page
    assert "snapshots/code_upload.js" in page
    assert f'<option value="{code.pk}">Code #{code.pk}: 1 file' in page

    response = client.post(f"/projects/{project.pk}/sweeps/new/", {"source": EXAMPLE, "code_snapshot": code.pk})
    sweep = Sweep.objects.get()
    assert response.status_code == 302, response.content.decode()[:2000]
    assert sweep.template["code_snapshot"] == code.pk
    control_sweep(sweep.pk)
    jobs = [t.job for t in sweep.trials.select_related("job")]
    assert len(jobs) == 2, sweep.state_reason
    assert {(j.command, j.code_snapshot_id) for j in jobs} == {("python examples/train_digits.py", code.pk)}


def test_the_form_refuses_code_of_another_project_and_creates_nothing(client_for, owner, project, other_project, outsider):
    from sweeps.forms import EXAMPLE
    from tests.snapshots.builders import make_snapshot

    theirs = make_snapshot(outsider, other_project, {"examples/train_digits.py": b"print('x')\n"})
    response = client_for(owner).post(
        f"/projects/{project.pk}/sweeps/new/", {"source": EXAMPLE, "code_snapshot": theirs.pk}
    )
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert not Sweep.objects.exists()


def test_a_template_that_could_never_submit_is_refused_at_create_naming_the_field(
    api_for, client_for, owner, project, other_project, outsider, settings
):
    """Snapshot, inputs and image are checked as a job's submit checks them, before any
    trial: 400 naming the template's field, no sweep and no job."""
    from jobs.models import Job
    from tests.snapshots.builders import make_snapshot

    settings.GANTRY_LOCAL_CPUS = 8
    theirs = make_snapshot(outsider, other_project, {"train.py": b"print(1)\n"})
    api = api_for(owner)
    cases = {
        "template.code_snapshot": {"code_snapshot": theirs.pk},
        "template.inputs": {"inputs": [{"dataset_version": 999_999}]},
        "template.image": {"image": 999_999},
    }
    for field, change in cases.items():
        spec = {**DOC, "template": {**DOC["template"], **change}}
        response = api.post("/api/v1/sweeps/", {"project": project.pk, "spec": spec}, format="json")
        assert response.status_code == 400, (field, response.json())
        assert response.json()["template"][0].startswith(f"{field}:"), response.json()
    # The top-level code_snapshot (what `gantry sweep start` sends) is checked the same way.
    response = api.post(
        "/api/v1/sweeps/", {"project": project.pk, "spec": DOC, "code_snapshot": theirs.pk}, format="json"
    )
    assert response.json() == {"template": [f"template.code_snapshot: No such code snapshot: {theirs.pk}."]}
    # The page says the same above the form.
    source = "\n".join(f"{key}: {json.dumps(value)}" for key, value in DOC.items())
    source = source.replace('"memory_mb": 256', '"memory_mb": 256, "inputs": [{"dataset_version": 999999}]')
    page = client_for(owner).post(f"/projects/{project.pk}/sweeps/new/", {"source": source})
    assert page.status_code == 400 and "template.inputs:" in page.content.decode()
    assert not Sweep.objects.exists() and not Job.objects.exists()


def test_the_api_takes_code_snapshot_and_pins_dataset_inputs_for_every_trial(api_for, owner, project, settings):
    from datasets.services import catalog
    from tests.datasets.builders import upload_files
    from tests.snapshots.builders import make_snapshot

    settings.GANTRY_LOCAL_CPUS = 8
    code = make_snapshot(owner, project, {"train.py": b"print(1)\n"})
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    first = upload_files(owner, dataset, {"train.csv": b"a\n1\n"}).version
    spec = {**DOC, "template": {**DOC["template"], "inputs": [{"dataset": "digits"}]}}
    created = api_for(owner).post(
        "/api/v1/sweeps/", {"project": project.pk, "spec": spec, "code_snapshot": code.pk}, format="json"
    )
    assert created.status_code == 201, created.json()
    template = created.json()["template"]
    assert template["code_snapshot"] == code.pk
    assert template["inputs"][0]["dataset_version"] == first.pk
    upload_files(owner, dataset, {"more.csv": b"b\n2\n"})  # a newer version: trials keep the first
    control_sweep(created.json()["id"])
    sweep = Sweep.objects.get()
    assert {t.job.inputs[0]["dataset_version"] for t in sweep.trials.select_related("job")} == {first.pk}


def test_the_empty_list_offers_the_new_sweep_button_it_talks_about(client_for, owner, member, project):
    page = client_for(owner).get("/sweeps/").content.decode()
    assert f'href="/projects/{project.pk}/sweeps/new/"' in page
    assert "New sweep in Vision" in page
    page = client_for(member).get("/sweeps/").content.decode()
    assert "sweeps/new/" not in page and "needs the developer role" in page
