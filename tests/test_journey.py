"""A newcomer's whole path through the browser (issue 27's "Done when"), from an empty database.

Real processes only: uvicorn serves Gantry over the test database, a real `manage.py
qcluster` admits and launches jobs, real executors run them (unsandboxed, as the fault
tests do: the sandbox has its own tests). Debian's chromium under Playwright clicks
through the pages: the only URLs typed are the start page and the invitation link the
email carries (read from the development server's console mail, as from a mail client).

1. The lab administrator (made by `manage.py createsuperuser`, the install step) signs
   in, creates a tenant and a project from the home page's checklist, invites the
   newcomer by email as a tenant admin, and signs out.
2. The newcomer opens the link, creates an account (the only sign-up there is), makes an
   API token (and uses it), creates a dataset and uploads a file, submits a training job
   from the job form, watches it succeed on the live page, opens its TensorBoard (on the
   notebook origin, entered with a ticket), registers its output as a
   model, sets an alias, runs a prediction job from the model version, looks at the
   cluster (quotas), the queue, the quota form and the audit log, and signs out.
   Between the two, it starts a notebook and opens it with "Open JupyterLab", and runs
   the digits example and its 2-worker DDP version with examples/ uploaded as the code.

The training job is an inline `python -c` command (it writes an output and logs a
metric): the examples need torch, and their code would need a path typed into the form.

Each page is screenshotted into test-artifacts/journey/ (git-ignored). The test fails on
any JavaScript error (pageerror) or any response with status 500 or above.
The ORM is read only outside the browser block (Playwright's sync API runs an event loop
in this thread, where Django refuses synchronous queries).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command

from accounts.models import Tenant, User
from jobs.models import Job
from modelhub.models import Alias, ModelVersion
from tests.core.test_narrow_browser import DESKTOP, PHONE, assert_fits, assert_job_table_fits
from tests.faults.conftest import web  # noqa: F401 - a fixture used here
from tests.faults.procs import QCluster
from tests.interactive.notebooks import OriginServer
from tests.jobs.conftest import job_settings  # noqa: F401 - a fixture web uses
from tests.jobs.test_browser import chromium

pytestmark = pytest.mark.slow

ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts" / "journey"
EXAMPLES = Path(settings.BASE_DIR) / "examples"  # chosen in the form's folder picker
ADMIN_PASSWORD = "install-time passphrase 7"
PASSWORD = "a newcomer's long passphrase 42"
TRAIN = (
    'python -c "import os; from executor import log_metric; '
    "log_metric('loss', 0.25, step=1); log_metric('loss', 0.125, step=2); "
    "from tensorboard.summary import DirectoryOutput, Writer; "
    "w = Writer(DirectoryOutput('tb/train')); w.add_scalar('loss', 0.25, step=1); w.close(); "
    "open(os.path.join(os.environ['GANTRY_OUTPUTS_DIR'], 'model.pt'), 'wb').write(b'w' * 4096); "
    "print('trained')\""
)
PREDICT = "python -c \"import os; print('predicting with', sorted(os.listdir('model')))\""


def _invitation_link(log: Path, deadline: float = 30) -> str:
    """The link in the invitation mail the development server printed (console backend)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = re.findall(r"https?://\S+/invitations/accept/\S+/", log.read_text(errors="replace"))
        if found:
            return found[-1]
        time.sleep(0.2)
    raise AssertionError(f"no invitation mail in the server's log:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def _shown_on_failure(current_page):
    """On a failure, a screenshot of what the page showed then (the browser still open)."""
    try:
        yield
    except Exception:
        page = current_page()
        if page is not None and not page.is_closed():
            page.screenshot(path=ARTIFACTS / "failed.png")
        raise


def test_a_newcomer_goes_from_an_empty_database_to_a_prediction(
    web,  # noqa: F811
    tmp_path,
    monkeypatch,
    settings,
):
    from playwright.sync_api import expect

    assert not User.objects.exists() and not Tenant.objects.exists()
    # The web server hashes with the project's hashers, not the tests' fast MD5.
    from django.conf import global_settings

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", ADMIN_PASSWORD)
    call_command(
        "createsuperuser", username="labadmin", email="admin@example.org", interactive=False
    )
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    shots: list[str] = []
    errors: list[str] = []
    failures: list[str] = []
    # The notebook origin (TensorBoard is served there), as `manage.py serve` runs it
    # beside Gantry; Gantry must know its address to send the browser there.
    origin = OriginServer().__enter__()
    settings.GANTRY_NOTEBOOK_ORIGIN = origin.origin_template
    settings.GANTRY_TENSORBOARD_IDLE_MINUTES = 0.5  # the origin here starts it: gone soon after
    web.stop()
    web.env["GANTRY_NOTEBOOK_ORIGIN"] = origin.origin_template
    web.start()
    cluster = QCluster(tmp_path, web.url)
    # One deployment: the worker commits uploads into the files the web server stores.
    cluster.env["GANTRY_DATA_DIR"] = web.env["GANTRY_DATA_DIR"]
    cluster.start()

    def watch(page):
        page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
        page.on(
            "response",
            lambda r: r.status >= 500
            and not starting(r)
            and failures.append(f"{r.status} {r.request.method} {r.url}"),
        )
        return page

    def starting(response) -> bool:
        # The notebook origin's page for a server still starting (TensorBoard is started
        # by the first request): 503 with Retry-After, reloading itself until it answers.
        return response.status == 503 and "retry-after" in response.headers

    def shot(page, name: str) -> None:
        page.wait_for_load_state("load")
        path = ARTIFACTS / f"{len(shots) + 1:02d}-{name}.png"
        page.screenshot(path=path)
        shots.append(path.name)

    def user_menu(page, item: str) -> None:
        page.get_by_role("button", name=re.compile("labadmin|newcomer")).click()
        page.get_by_role("link", name=item).or_(page.get_by_role("button", name=item)).click()

    def sign_out(page) -> None:
        user_menu(page, "Sign out")
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()

    page = None
    try:
        with chromium() as browser, _shown_on_failure(lambda: page):
            # --- 1. The lab administrator sets up a tenant and invites the newcomer.
            page = watch(browser.new_context(viewport={"width": 1280, "height": 900}).new_page())
            page.goto(web.url + "/")
            expect(page.get_by_role("button", name="Sign in")).to_be_visible()
            shot(page, "sign-in")
            page.get_by_label("Username").fill("labadmin")
            page.get_by_label("Password").fill(ADMIN_PASSWORD)
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("heading", name="Welcome, labadmin")).to_be_visible()
            shot(page, "home-empty")
            page.get_by_role("link", name="Create a tenant").click()
            page.get_by_label("Name").fill("Vision Lab")
            shot(page, "tenant-form")
            page.get_by_role("button", name=re.compile("Create|Save")).click()
            expect(page.get_by_role("heading", name="Vision Lab")).to_be_visible()
            shot(page, "tenant")
            page.get_by_role("link", name="Gantry").first.click()
            page.get_by_role("link", name="New project").click()
            page.get_by_label("Name").fill("Digits")
            page.get_by_role("button", name=re.compile("Create|Save")).click()
            expect(page.get_by_role("heading", name="Digits")).to_be_visible()
            shot(page, "project")
            page.get_by_role("link", name="Vision Lab").first.click()
            page.get_by_role("link", name="Invite by email").click()
            page.get_by_label("Email").fill("newcomer@example.org")
            page.get_by_label("Role").first.select_option("admin")
            shot(page, "invite")
            page.get_by_role("button", name="Send invitation").click()
            expect(page.locator("#invitations")).to_contain_text("newcomer@example.org")
            shot(page, "invited")
            sign_out(page)
            page.context.close()

            # --- 2. The newcomer accepts, from the emailed link.
            link = _invitation_link(web.log_path)
            assert link.startswith(web.url), link
            page = watch(browser.new_context(viewport={"width": 1280, "height": 900}).new_page())
            page.goto(link)
            expect(page.get_by_role("heading", name=re.compile("Join Vision Lab"))).to_be_visible()
            shot(page, "invitation")
            page.get_by_label("Username").fill("newcomer")
            page.get_by_label(re.compile(r"^Password(?! again)")).fill(PASSWORD)
            page.get_by_label("Password again").fill(PASSWORD)
            page.get_by_role("button", name="Create account and join").click()
            expect(page.get_by_role("heading", name="Vision Lab")).to_be_visible()
            expect(page.locator("body")).to_contain_text("Welcome to Vision Lab, newcomer")
            shot(page, "joined")

            # An API token, shown once, that works.
            user_menu(page, "API tokens")
            page.get_by_label("Name").fill("laptop")
            page.get_by_role("button", name="Create token").click()
            key = page.locator("#new-key").input_value()
            assert key.startswith("gty_"), key
            shot(page, "token")
            answer = httpx.get(
                f"{web.url}/api/v1/projects/",
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            assert answer.status_code == 200 and "Digits" in answer.text, answer.text[:500]

            # The home page's checklist leads to the data step.
            page.get_by_role("link", name="Gantry").first.click()
            expect(page.get_by_role("heading", name="Welcome, newcomer")).to_be_visible()
            shot(page, "home-checklist")
            page.get_by_role("link", name="New dataset in Digits").click()
            page.get_by_label("Name").fill("digits-sample")
            page.get_by_role("button", name=re.compile("Create|Save")).click()
            expect(page.get_by_role("heading", name="digits-sample")).to_be_visible()
            shot(page, "dataset")
            page.get_by_role("link", name=re.compile("Upload")).first.click()
            sample = tmp_path / "sample.csv"
            sample.write_text("pixel,label\n" + "".join(f"{i},{i % 10}\n" for i in range(200)))
            page.wait_for_load_state("load")  # upload.js listens from then on
            with page.expect_file_chooser() as chooser:
                page.get_by_text("Choose files").click()
            chooser.value.set_files(str(sample))
            expect(page.get_by_role("row", name=re.compile("sample.csv"))).to_be_visible()
            page.get_by_label("Version message").fill("first sample")
            page.get_by_role("button", name="Upload and commit").click()
            expect(page.get_by_role("heading", name=re.compile("v1"))).to_be_visible(timeout=60_000)
            expect(page.locator("body")).to_contain_text("sample.csv")
            shot(page, "dataset-version")

            # A training job from the job form, watched to success on the live page.
            page.get_by_role("link", name="Gantry").first.click()
            page.get_by_role("link", name="Submit a job in Digits").click()
            page.get_by_label("Name", exact=True).fill("first training")
            page.get_by_label("Command").fill(TRAIN)
            shot(page, "job-form")
            page.get_by_role("button", name=re.compile("Submit")).click()
            expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=120_000)
            expect(page.locator("#job-outputs")).to_contain_text("model.pt", timeout=30_000)
            shot(page, "job-succeeded")

            # Its TensorBoard, in a tab of its own on the notebook origin (via a ticket).
            with page.context.expect_page() as opened:
                page.get_by_role("link", name="Open TensorBoard").click()
            board = watch(opened.value)
            expect(board.get_by_text("tb/train").first).to_be_visible(timeout=120_000)
            assert re.match(rf"http://\d+\.nb\.localhost:{origin.port}/jobs/\d+/tensorboard/", board.url)
            shot(board, "tensorboard")
            board.close()

            # Its output registered as a model, with an alias.
            page.get_by_role("link", name=re.compile("Register as model")).click()
            page.get_by_label("model.pt").check()
            page.get_by_label("New model name").fill("digits-cnn")
            page.get_by_label("Description").fill("the newcomer's first model")
            shot(page, "register")
            page.get_by_role("button", name="Register version").click()
            expect(page.get_by_role("heading", name=re.compile("digits-cnn"))).to_be_visible()
            expect(page.locator("body")).to_contain_text("the newcomer's first model")
            shot(page, "model-version")
            page.get_by_role("navigation", name="breadcrumb").get_by_role(
                "link", name="digits-cnn"
            ).click()
            page.get_by_placeholder("production").fill("production")
            page.get_by_role("button", name="Set", exact=True).click()
            expect(page.locator("body")).to_contain_text("production")
            shot(page, "model-alias")

            # A prediction job from the version.
            page.get_by_role("link", name="v1").first.click()
            page.get_by_role("link", name="Predict with this model").click()
            page.get_by_label("Command").fill(PREDICT)
            shot(page, "predict-form")
            page.get_by_role("button", name="Submit prediction job").click()
            expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=120_000)
            shot(page, "prediction-succeeded")

            # A notebook from the job form, opened with "Open JupyterLab" (a tab on its
            # origin, through a ticket), then cancelled from its page.
            page.get_by_role("navigation", name="breadcrumb").get_by_role("link").first.click()
            page.get_by_role("link", name="Submit job").click()
            page.get_by_role("link", name="Notebook (JupyterLab)").click()
            page.get_by_label("Name", exact=True).fill("explore")
            shot(page, "notebook-form")
            page.get_by_role("button", name=re.compile("Submit|Start")).click()
            expect(page.locator("#job-state")).to_have_text("Running", timeout=120_000)
            with page.context.expect_page() as opened:
                page.get_by_role("link", name="Open JupyterLab").click()
            lab = opened.value
            lab.on("pageerror", lambda exc: errors.append(f"{lab.url}: {exc}"))
            # "Running" comes when JupyterLab's process starts; until it listens, the
            # origin answers 503 "Notebook starting", a page that reloads by itself (the
            # user does nothing).
            expect(lab.locator("#jp-main-dock-panel")).to_be_visible(timeout=120_000)
            assert re.match(rf"http://\d+\.nb\.localhost:{origin.port}/jobs/\d+/lab", lab.url)
            shot(lab, "jupyterlab")
            lab.close()
            page.locator("#job-cancel").click()
            page.locator("#job-cancel-confirm").click()
            expect(page.locator("#job-state")).to_have_text("Cancelled", timeout=60_000)

            job_pages = []
            # The digits example, then its 2-worker DDP version, each with the examples
            # folder uploaded as the job's code from the form (one epoch each).
            for tab, name, command in [
                (None, "digits", "python examples/train_digits.py --epochs 1"),
                ("Distributed training", "digits-ddp", "python examples/train_digits_ddp.py --epochs 1"),
            ]:
                page.get_by_role("navigation", name="breadcrumb").get_by_role("link").first.click()
                page.get_by_role("link", name="Submit job").click()
                if tab:
                    page.get_by_role("link", name=tab).click()
                    expect(page.get_by_label("Workers")).to_have_value("2")
                page.get_by_label("Name", exact=True).fill(name)
                page.set_input_files("#code-folder", str(EXAMPLES))
                expect(page.locator("#code-status")).to_contain_text("is ready", timeout=60_000)
                page.get_by_label("Command").fill(command)
                shot(page, f"{name}-form")
                page.get_by_role("button", name=re.compile("Submit")).click()
                expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=240_000)
                expect(page.locator("#job-outputs")).to_contain_text("model.pt", timeout=30_000)
                shot(page, f"{name}-succeeded")
                job_pages.append(page.url)

            # The cluster's quotas, the queue, the quota form and the audit log.
            page.get_by_role("link", name="Cluster").click()
            expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
            expect(page.locator("body")).to_contain_text("Vision Lab")
            shot(page, "cluster-quotas")
            page.get_by_role("link", name="Queue", exact=True).first.click()
            expect(page.get_by_role("heading", name=re.compile("Queue"))).to_be_visible()
            shot(page, "queue")
            page.get_by_role("link", name="Cluster").first.click()
            page.get_by_role("link", name="Edit quota").click()
            expect(page.get_by_label("Guaranteed GPUs")).to_be_visible()
            shot(page, "quota")
            user_menu(page, "Audit log")
            expect(page.locator("body")).to_contain_text("digits-cnn")
            shot(page, "audit")

            # On a phone the pages scroll vertically only; on a laptop the job list's
            # table fits its card (issue 42 item 2).
            phone = watch(page.context.new_page())
            phone.set_viewport_size(PHONE)
            for url in (web.url + "/", job_pages[0], web.url + "/jobs/"):
                phone.goto(url)
                assert_fits(phone, url)
            shot(phone, "job-list-phone")
            phone.set_viewport_size(DESKTOP)
            assert_fits(phone, "the job list at 1,400 px")
            assert_job_table_fits(phone)
            phone.close()
            sign_out(page)
            shot(page, "signed-out")
            page.context.close()
    finally:
        cluster.stop()
        origin.__exit__(None, None, None)

    assert not errors, errors
    assert not failures, failures
    assert len(shots) >= 20 and all((ARTIFACTS / name).stat().st_size > 0 for name in shots)
    newcomer = User.objects.get(username="newcomer")
    train, predict, notebook, digits, ddp = Job.objects.filter(created_by=newcomer).order_by("pk")
    assert train.state == predict.state == digits.state == ddp.state == "succeeded"
    assert notebook.kind == "notebook" and notebook.state == "cancelled"
    assert ddp.kind == "distributed" and ddp.workers == 2
    assert digits.code_snapshot_id and ddp.code_snapshot_id
    version = ModelVersion.objects.get(model__name="digits-cnn")
    assert version.source_job_id == train.pk
    assert Alias.objects.get(name="production").version == version
