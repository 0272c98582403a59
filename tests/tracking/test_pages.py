"""The experiment and run pages: a project's experiments, an experiment's runs table
(filtered, sorted, paginated, in a fixed number of queries), runs side by side, a run."""

import json
import re

import pytest

from jobs.services.submit import submit_job
from tests.tracking.builders import log_run
from tracking import jobenv
from tracking.services.access import Caller
from tracking.services.experiments import create_experiment
from tracking.services.runs import log_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweep(owner, project):
    experiment = create_experiment(Caller(owner), "lab-a/vision/sweep")
    runs = {
        lr: log_run(
            owner,
            experiment,
            f"lr-{lr}",
            params={"lr": lr, "optimizer": "adam"},
            metrics={"loss": losses, "acc": accs},
            status=status,
            tags={"team": team},
        )
        for lr, losses, accs, status, team in (
            (0.1, [1.0, 0.4, 0.6], [0.5, 0.7, 0.6], "FINISHED", "vision"),
            (0.01, [1.0, 0.3, 0.2], [0.6, 0.8, 0.9], "FINISHED", "vision"),
            (0.001, [1.0, 0.9], [0.2, 0.3], "FAILED", "nlp"),
        )
    }
    return experiment, runs


def _run_ids(response) -> list[str]:
    return re.findall(r'<tr data-run="([0-9a-f]+)"', response.content.decode())


def test_owner_and_member_see_the_projects_experiments_and_outsiders_get_404(
    client_for, owner, member, outsider, project, sweep
):
    experiment, _ = sweep
    for user in (owner, member):
        page = client_for(user).get(f"/projects/{project.pk}/experiments/")
        assert page.status_code == 200
        assert f'href="/experiments/{experiment.pk}/"' in page.content.decode()
    outsider_client = client_for(outsider)
    assert outsider_client.get(f"/projects/{project.pk}/experiments/").status_code == 404
    assert outsider_client.get(f"/experiments/{experiment.pk}/").status_code == 404
    run = next(iter(sweep[1].values()))
    assert outsider_client.get(f"/runs/{run.pk}/").status_code == 404
    assert outsider_client.get(f"/experiments/{experiment.pk}/compare/").status_code == 404


def test_an_empty_project_says_how_runs_get_there(client_for, owner, project):
    page = client_for(owner).get(f"/projects/{project.pk}/experiments/")
    assert b"No experiments yet" in page.content and b"MLFLOW_TRACKING_URI" in page.content


def test_runs_table_has_params_and_last_and_best_metrics_as_columns(client_for, owner, sweep):
    experiment, runs = sweep
    page = client_for(owner).get(f"/experiments/{experiment.pk}/")
    text = page.content.decode()
    for column in ('data-order="params.`lr`"', 'data-order="metrics.`loss`"'):
        assert column in text
    row = text[text.index(f'data-run="{runs[0.1].run_id}"') :].split("</tr>")[0]
    assert ">0.6<" in row and "best 0.4" in row  # loss: last 0.6, lowest 0.4
    assert "best 0.7" in row  # acc: last 0.6, highest 0.7
    assert set(_run_ids(page)) == {r.run_id for r in runs.values()}


def test_runs_filter_by_metric_param_tag_and_state(client_for, owner, sweep):
    experiment, runs = sweep
    client = client_for(owner)
    url = f"/experiments/{experiment.pk}/"
    assert _run_ids(client.get(url, {"filter": "metrics.acc > 0.65"})) == [runs[0.01].run_id]
    assert _run_ids(client.get(url, {"filter": "params.lr = '0.1'"})) == [runs[0.1].run_id]
    assert _run_ids(client.get(url, {"filter": "tags.team = 'nlp'"})) == [runs[0.001].run_id]
    assert _run_ids(client.get(url, {"state": "FAILED"})) == [runs[0.001].run_id]
    nothing = client.get(url, {"filter": "metrics.acc > 5"})
    assert b"No run matches" in nothing.content


def test_a_filter_that_does_not_parse_says_why_and_shows_every_run(client_for, owner, sweep):
    experiment, runs = sweep
    page = client_for(owner).get(f"/experiments/{experiment.pk}/", {"filter": "metrics.acc >> 1"})
    assert page.status_code == 400
    assert b"Not applied: Invalid" in page.content
    assert len(_run_ids(page)) == len(runs)


def test_runs_sort_by_any_column(client_for, owner, sweep):
    experiment, runs = sweep
    client = client_for(owner)
    url = f"/experiments/{experiment.pk}/"
    by_acc = _run_ids(client.get(url, {"order": "metrics.`acc` DESC"}))
    assert by_acc == [runs[0.01].run_id, runs[0.1].run_id, runs[0.001].run_id]
    by_lr = _run_ids(client.get(url, {"order": "params.`lr` ASC"}))
    assert by_lr == [runs[0.001].run_id, runs[0.01].run_id, runs[0.1].run_id]
    by_name = _run_ids(client.get(url, {"order": "attributes.run_name DESC"}))
    assert by_name == [runs[0.1].run_id, runs[0.01].run_id, runs[0.001].run_id]
    # The header link flips the direction of the column the table is sorted by.
    page = client.get(url, {"order": "metrics.`acc` DESC"}).content.decode()
    assert "order=metrics.%60acc%60+ASC" in page


def test_runs_table_pages_in_a_fixed_number_of_queries(
    client_for, owner, project, django_assert_max_num_queries
):
    experiment = create_experiment(Caller(owner), "lab-a/vision/many")
    client = client_for(owner)
    url = f"/experiments/{experiment.pk}/"

    def fill(count):
        for i in range(count):
            log_run(
                owner, experiment, f"r{i}", params={"lr": i, "seed": 1}, metrics={"loss": [i, 1]}
            )

    fill(3)
    client.get(url)  # the session and the access cache warmed up
    with django_assert_max_num_queries(20) as few:
        assert len(_run_ids(client.get(url))) == 3
    fill(60)
    with django_assert_max_num_queries(len(few.captured_queries)) as many:
        page = client.get(url)
    assert len(_run_ids(page)) == 50 and b"Page 1 of 2" in page.content
    assert len(_run_ids(client.get(url, {"page": 2}))) == 13
    assert len(many.captured_queries) == len(few.captured_queries)


def test_experiments_list_in_a_fixed_number_of_queries(
    client_for, owner, project, django_assert_max_num_queries
):
    client = client_for(owner)
    url = f"/projects/{project.pk}/experiments/"
    for name in ("a", "b"):
        log_run(owner, create_experiment(Caller(owner), f"lab-a/vision/{name}"), "r")
    client.get(url)
    with django_assert_max_num_queries(20) as few:
        client.get(url)
    for i in range(10):
        log_run(owner, create_experiment(Caller(owner), f"lab-a/vision/e{i}"), "r")
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = client.get(url)
    assert page.content.count(b'href="/experiments/') == 12


def test_job_runs_and_outside_runs_appear_alike_and_link_to_each_other(
    client_for, owner, project, job_settings
):
    job = submit_job(owner, project, name="train", command="python -c pass")
    job_run = jobenv.run_for_job(job)
    log_batch(
        Caller(owner),
        job_run.run_id,
        metrics=[{"key": "loss", "value": 0.5, "timestamp": 1, "step": 0}],
    )
    outside = log_run(owner, job_run.experiment, "by-hand", metrics={"loss": [0.7]})
    client = client_for(owner)
    page = client.get(f"/experiments/{job_run.experiment_id}/")
    assert set(_run_ids(page)) == {job_run.run_id, outside.run_id}
    assert f'href="/jobs/{job.pk}/"' in page.content.decode()
    job_page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'id="job-run" href="/runs/{job_run.pk}/"' in job_page
    run_page = client.get(f"/runs/{job_run.pk}/").content.decode()
    assert f'id="run-job" href="/jobs/{job.pk}/"' in run_page
    project_page = client.get(f"/projects/{project.pk}/").content.decode()
    assert f'href="/projects/{project.pk}/experiments/"' in project_page


def test_run_page_charts_its_metrics_beside_params_and_tags(client_for, owner, sweep):
    _, runs = sweep
    page = client_for(owner).get(f"/runs/{runs[0.1].pk}/")
    text = page.content.decode()
    charts = json.loads(re.search(r'id="run-charts"[^>]*>(.*?)</script>', text, re.S).group(1))
    assert [c["key"] for c in charts] == ["acc", "loss"]
    assert charts[1]["series"][0]["points"] == [[0, 1.0], [1, 0.4], [2, 0.6]]
    assert "optimizer" in text and "adam" in text and "team" in text
    assert "vendor/uplot/uPlot.iife.min.js" in text  # the vendored library, no CDN


def test_mlflows_run_link_reaches_the_run_page(client_for, owner, sweep):
    experiment, runs = sweep
    client = client_for(owner)
    response = client.get(f"/experiments/{experiment.pk}/", {"run": runs[0.1].run_id})
    assert response.status_code == 302 and response.url == f"/runs/{runs[0.1].pk}/"
    assert client.get(f"/experiments/{experiment.pk}/", {"run": "nope"}).status_code == 404


def test_compare_puts_differing_params_first_and_charts_every_metric(client_for, owner, sweep):
    experiment, runs = sweep
    picked = [runs[0.1].run_id, runs[0.01].run_id]
    page = client_for(owner).get(f"/experiments/{experiment.pk}/compare/", {"run": picked})
    assert page.status_code == 200
    text = page.content.decode()
    table = text[text.index('id="compare-params"') :].split("</table>")[0]
    assert table.index(">lr<") < table.index(">optimizer<")
    assert table.count("data-differs") == 1
    charts = json.loads(re.search(r'id="run-charts"[^>]*>(.*?)</script>', text, re.S).group(1))
    assert [c["key"] for c in charts] == ["acc", "loss"]
    assert [len(c["series"]) for c in charts] == [2, 2]


def test_compare_refuses_too_many_runs_and_names_runs_of_other_experiments(
    client_for, owner, project, sweep
):
    experiment, runs = sweep
    other = create_experiment(Caller(owner), "lab-a/vision/other")
    stranger = log_run(owner, other, "elsewhere")
    client = client_for(owner)
    url = f"/experiments/{experiment.pk}/compare/"
    assert client.get(url, {"run": [f"r{i}" for i in range(11)]}).status_code == 400
    page = client.get(url, {"run": [runs[0.1].run_id, stranger.run_id]})
    assert b"Not in this experiment" in page.content and stranger.run_id.encode() in page.content
