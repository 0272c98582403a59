"""Gantry on a phone and on a laptop (issue 42 item 2), in Chromium against uvicorn.

At 390 px (a phone held upright) the home page, a running job's page and the job list
scroll vertically only: nothing makes the document wider than the window (wide tables
scroll inside their own card; the navigation collapses behind its menu button). At
1,400 px the job list's table fits its card without a scrollbar of its own.
"""

import pytest
from django.test import Client

from jobs.models import Job
from jobs.services.submit import submit_job
from jobs.states import transition
from tests.jobs.test_browser import SECRET, FakeExecutor, asgi_server, chromium  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}
# What a lab's job list holds: long names, long reasons, wide resources.
LONG_NAME = "resnet50-imagenet-finetune-lr0.003-bs256-warmup5-cosine-seed1"
LONG_COMMAND = "python examples/train_digits.py --epochs 10 --lr 0.003 --batch-size 64 --seed 1"


def too_wide(page) -> dict:
    """The document's width against the window's, and the elements that stick out."""
    return page.evaluate(
        """() => {
          const width = window.innerWidth;
          const out = [...document.querySelectorAll("body *")]
            .filter((el) => el.getBoundingClientRect().right > width + 1 && el.getClientRects().length)
            .filter((el) => !el.closest(".table-responsive, .job-log, .dropdown-menu"))
            .slice(0, 8)
            .map((el) => `${el.tagName.toLowerCase()}#${el.id}.${[...el.classList].join(".")} ` +
                         `right=${Math.round(el.getBoundingClientRect().right)}`);
          return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, out};
        }"""
    )


def assert_fits(page, what: str) -> None:
    page.wait_for_load_state("load")
    seen = too_wide(page)
    assert seen["scrollWidth"] <= seen["innerWidth"], f"{what} overflows: {seen}"


def assert_job_table_fits(page) -> None:
    """The job list's table needs no scrollbar of its own."""
    table = page.locator("#job-table .table-responsive")
    widths = table.evaluate(
        "el => [el.scrollWidth, el.clientWidth, [...el.querySelectorAll('thead th')]"
        ".map((th) => `${th.textContent}: ${Math.round(th.getBoundingClientRect().width)}`)]"
    )
    assert widths[0] <= widths[1], f"the job table is wider than its card: {widths}"


def test_pages_fit_a_phone_and_the_job_table_fits_a_laptop(asgi_server, owner, project):  # noqa: F811
    from playwright.sync_api import expect

    running = submit_job(owner, project, name=LONG_NAME, command=LONG_COMMAND, gpus=0)
    transition(running, "admitted", "test")
    transition(running, "starting", "test", token_hash=Job.hash_token(SECRET))
    transition(running, "running", "running on this machine, placed beside two other jobs of the tenant")
    for n in range(3):
        submit_job(owner, project, name=f"{LONG_NAME}-{n}", command=LONG_COMMAND, gpus=0)
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value
    executor = FakeExecutor(asgi_server, running.pk)
    executor.log("epoch 1 " + "x" * 300, "a path: /data/" + "/".join(["deep"] * 40))
    executor.metric("loss", 1, 2.0)
    executor.metric("val_accuracy", 1, 0.5)

    with chromium() as browser:
        context = browser.new_context(viewport=PHONE)
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        page.goto(asgi_server + "/")
        assert_fits(page, "home")
        page.locator(".navbar-toggler").click()  # the navigation, collapsed behind its button
        expect(page.locator("#nav")).to_be_visible()
        assert_fits(page, "home with the menu open")
        page.goto(f"{asgi_server}/jobs/{running.pk}/")
        page.wait_for_selector("#job-page[data-live='live']")
        page.wait_for_selector(".metric-chart[data-metric='val_accuracy']")
        assert_fits(page, "the job page")
        page.goto(f"{asgi_server}/jobs/")
        assert_fits(page, "the job list")
        # The table is still all there: it scrolls inside its card.
        table = page.locator("#job-table .table-responsive")
        assert table.evaluate("el => el.scrollWidth > el.clientWidth")
        context.close()

        context = browser.new_context(viewport=DESKTOP)
        context.add_cookies([{"name": "sessionid", "value": session, "url": asgi_server}])
        page = context.new_page()
        page.goto(f"{asgi_server}/jobs/")
        assert_fits(page, "the job list at 1,400 px")
        assert_job_table_fits(page)
        context.close()
