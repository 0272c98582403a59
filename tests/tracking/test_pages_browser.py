"""The run pages in a real browser (Debian's chromium under Playwright, against Django's
live server): the link MLflow's client prints opens the run's page, signed in or after
signing in; charts draw; ticked runs compare; a phone-wide screen scrolls the runs
table inside its card, not the page."""

import re
from pathlib import Path

import mlflow
import pytest
from django.test import Client

from tests.conftest import service_required

CHROMIUM = "/usr/bin/chromium"

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _playwright():
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:  # pragma: no cover - playwright is a dev dependency
        sync_playwright = expect = None
    service_required(
        "chromium + playwright", Path(CHROMIUM).exists() and sync_playwright is not None
    )
    expect.set_options(timeout=15_000)
    return sync_playwright, expect


def test_mlflows_printed_link_opens_the_run_and_runs_compare(
    live_server, mlflow_env, token_for, owner, project, capsys
):
    sync_playwright, expect = _playwright()
    mlflow_env(token_for(owner, project))
    mlflow.set_experiment("digits")
    for lr in (0.1, 0.01):
        with mlflow.start_run(run_name=f"lr-{lr}"):
            mlflow.log_param("lr", lr)
            for step in range(5):
                mlflow.log_metrics({"loss": lr / (step + 1), "acc": step / 5}, step=step)
    printed = re.findall(r"View run lr-0\.01 at: (\S+)", capsys.readouterr().out)
    assert printed and printed[0].startswith(f"{live_server.url}/#/experiments/")
    signed_in = Client()
    signed_in.force_login(owner)
    session = signed_in.cookies["sessionid"].value

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            errors = []
            context = browser.new_context()
            context.add_cookies([{"name": "sessionid", "value": session, "url": live_server.url}])
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(printed[0])
            expect(page.locator("h1")).to_contain_text("lr-0.01")
            expect(page.locator("#run-charts-grid")).to_have_attribute("data-charts", "2")
            assert page.locator("#run-charts-grid canvas").count() == 2

            page.get_by_role("link", name="digits").click()
            page.locator("input[name=run]").nth(0).check()
            page.locator("input[name=run]").nth(1).check()
            page.get_by_role("button", name="Compare ticked runs").click()
            expect(page.locator("h1")).to_contain_text("Compare 2 runs")
            expect(page.locator("#run-charts-grid")).to_have_attribute("data-charts", "2")
            expect(page.locator("#compare-params tr[data-differs]")).to_have_count(1)

            phone = browser.new_context(viewport={"width": 375, "height": 740})
            phone.add_cookies([{"name": "sessionid", "value": session, "url": live_server.url}])
            small = phone.new_page()
            small.goto(page.url.split("/compare/")[0] + "/")
            expect(small.locator("#runs")).to_be_visible()
            widths = small.evaluate(
                "() => [document.documentElement.scrollWidth, window.innerWidth,"
                " document.querySelector('#runs').parentElement.scrollWidth,"
                " document.querySelector('#runs').parentElement.clientWidth]"
            )
            assert widths[0] <= widths[1], widths  # the page does not scroll sideways
            assert widths[2] > widths[3], widths  # the table does, inside its card

            signed_out = browser.new_context().new_page()
            signed_out.goto(printed[0])
            signed_out.locator("#id_username").fill(owner.username)
            signed_out.locator("#id_password").fill("pw-" + owner.username)
            signed_out.locator("form button[type=submit]").click()
            expect(signed_out.locator("h1")).to_contain_text("lr-0.01")
            assert not errors, errors
        finally:
            browser.close()
