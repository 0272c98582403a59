"""What `gantry ps`, `cancel`, `datasets versions` and a refused `sweep start` print, as a
user runs them (a subprocess against the live server; issue 42)."""

import pytest

from datasets.services import catalog
from jobs.models import Job
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from sweeps.forms import EXAMPLE
from sweeps.models import Sweep
from tests.datasets.builders import upload_files
from tests.datasets.conftest import fs_storage  # noqa: F401 - a fixture used here

pytestmark = pytest.mark.django_db(transaction=True)


def test_ps_names_projects_and_says_when_no_job_matches(live_gantry, owner, project):
    job = submit_job(owner, project, name="waiting", command="python train.py")

    listed = live_gantry("ps")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith(str(job.pk)))
    assert "Vision" in row.split() and f" {project.pk} " not in f" {row} ".replace(str(job.pk), "", 1)

    none = live_gantry("ps", "--state", "running")
    assert none.returncode == 0, none.stderr
    assert none.stdout.strip() == "No jobs match --state running."


def test_cancelling_a_finished_job_prints_the_plain_message(live_gantry, owner, project):
    job = submit_job(owner, project, name="done", command="true")
    cancel_job(owner, job)

    done = live_gantry("cancel", str(job.pk))

    assert done.returncode == 6
    assert done.stderr.strip() == f"error: Job #{job.pk} has already finished (cancelled)."
    assert Job.objects.get(pk=job.pk).state == "cancelled"


def test_versions_show_human_sizes(live_gantry, fs_storage, owner, project):  # noqa: F811
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    upload_files(owner, dataset, {"train.csv": b"x" * 1536, "tiny.txt": b"abc"})

    done = live_gantry("datasets", "versions", "digits")

    assert done.returncode == 0, done.stderr
    assert "SIZE" in done.stdout and "1.5 KiB" in done.stdout and "1539" not in done.stdout


def test_a_refused_sweep_names_each_field_once(live_gantry, project, tmp_path):
    (tmp_path / "sweep.yml").write_text(
        EXAMPLE.replace("name: digits", "name: [a, list]").replace("high: 0.3", "high: 0.0001")
    )
    done = live_gantry("sweep", "start", "sweep.yml", "-p", "vision", "--no-code")
    assert done.returncode == 6
    assert "name: text of at most 200 characters" in done.stderr
    assert "parameters.lr: low must be below high" in done.stderr
    assert "name: name:" not in done.stderr and "parameters: parameters" not in done.stderr
    assert not Sweep.objects.exists()


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1536, 1048524, 1048575, 5 * 1024**3 + 1, 3 * 1024**5])
def test_the_cli_writes_sizes_as_the_pages_do(size):
    from gantry_cli.ui import human_size

    from core.formatting import format_size

    assert human_size(size) == format_size(size)
