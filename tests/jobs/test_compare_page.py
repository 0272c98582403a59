"""Compare metrics (issue 27 item 6): the page opens on a metric the jobs logged, keeps the
ticked jobs ticked when the metric changes, and draws a single value as a marker."""

import pytest
from django.test import Client
from django.urls import reverse

from jobs.services import ingestion
from tests.jobs.test_browser import asgi_server, chromium  # noqa: F401 - a fixture used here
from tests.jobs.test_live import running_job


def log(job, name, values, steps=True):
    seq = job.metrics.count()
    ingestion.ingest_metrics(
        job,
        0,
        [
            {"seq": seq + i, "name": name, "step": i if steps else None, "value": v}
            for i, v in enumerate(values, start=1)
        ],
    )


@pytest.fixture
def three_jobs(owner, project):
    a = running_job(owner, project, name="lr 0.1")
    log(a, "loss", [2.0, 1.0, 0.5, 0.25, 0.125])
    log(a, "val_acc", [0.9123456789012345], steps=False)  # once, at the end, without a step
    b = running_job(owner, project, name="lr 0.01")
    log(b, "loss", [4.0, 2.0, 1.0, 0.5, 0.25])
    c = running_job(owner, project, name="bench")
    log(c, "throughput", [812.5, 830.25])
    return a, b, c


@pytest.mark.django_db
def test_it_opens_on_a_metric_the_ticked_job_logged(client_for, owner, project, three_jobs):
    a, b, c = three_jobs
    client = client_for(owner)
    url = reverse("jobs:metric_compare", args=[project.pk])
    # From job C's page: C logged only throughput ("loss" comes first by name).
    response = client.get(url, {"job": c.pk})
    assert response.context["name"] == "throughput"
    assert [s["job"] for s in response.context["series"]] == [c.pk]
    assert response.context["series"][0]["points"] == [[1, 812.5], [2, 830.25]]
    # No job given: the newest job's metric, with points.
    assert client.get(url).context["name"] == "throughput"
    # A value logged without a step is placed by its order, never dropped.
    series = client.get(url, {"name": "val_acc", "job": a.pk}).context["series"]
    assert series == [{"job": a.pk, "label": f"#{a.pk} lr 0.1", "points": [[1, 0.9123456789012345]]}]


@pytest.mark.django_db
def test_a_ticked_job_without_the_metric_stays_ticked(client_for, owner, project, three_jobs):
    a, b, c = three_jobs
    response = client_for(owner).get(
        reverse("jobs:metric_compare", args=[project.pk]), {"name": "val_acc", "job": [a.pk, b.pk]}
    )
    assert response.context["selected"] == {a.pk, b.pk}
    body = response.content.decode()
    assert f'id="job-{b.pk}" checked' in body and "no val_acc" in body
    # The last value with four significant digits, the full one on hover.
    assert '<span title="0.9123456789012345">0.9123</span>' in body


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_switching_metric_keeps_the_jobs_and_draws_a_single_value(
    asgi_server, owner, project, three_jobs  # noqa: F811
):
    from playwright.sync_api import expect

    a, b, c = three_jobs
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    with chromium() as browser:
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # "Compare with other jobs" on job A's page.
        page.goto(f"{asgi_server}/jobs/{a.pk}/")
        page.get_by_role("link", name="Compare with other jobs").click()
        expect(page.locator("#metric-name")).to_have_value("loss")
        expect(page.locator(f"#job-{a.pk}")).to_be_checked()
        page.check(f"#job-{b.pk}")
        page.get_by_role("button", name="Compare").click()
        chart = page.locator("#compare-chart")
        expect(chart).to_have_attribute("data-series", "2")

        page.select_option("#metric-name", "val_acc")  # submits the form
        expect(page.locator("#metric-name")).to_have_value("val_acc")
        expect(page.locator(f"#job-{a.pk}")).to_be_checked()
        expect(page.locator(f"#job-{b.pk}")).to_be_checked()
        expect(chart).to_have_attribute("data-points", "1")
        # Job A's one value is on the canvas in A's colour (#0d6efd), as a marker.
        drawn = chart.locator("canvas").evaluate(
            """c => { const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
                let n = 0;
                for (let i = 0; i < d.length; i += 4)
                  if (Math.abs(d[i] - 13) < 40 && Math.abs(d[i + 1] - 110) < 40 && Math.abs(d[i + 2] - 253) < 40 && d[i + 3] > 200) n++;
                return n; }"""
        )
        assert drawn >= 20, f"the single value is not drawn ({drawn} pixels)"
        expect(page.locator("#compare-last")).to_contain_text("0.9123")
        assert errors == []
        context.close()
