"""The New sweep page's own sample, as given, on the examples/ folder uploaded as its code:
a trial's job really runs examples/train_digits.py (local backend, real executor) and
succeeds with the objective the sample names (issue 42: without code every trial exited 2)."""

import pytest

from jobs.states import JobState
from sweeps.controller import control_sweep
from sweeps.forms import EXAMPLE
from sweeps.models import Sweep
from tests.jobs.conftest import wait_for
from tests.jobs.test_examples import EXAMPLES, required_module
from tests.snapshots.builders import make_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_sample_sweep_runs_on_the_uploaded_examples_folder(running_jobs, client_for, owner, project):
    required_module("torch")
    required_module("sklearn")
    files = {f"examples/{p.name}": p.read_bytes() for p in EXAMPLES.glob("*.py")}
    code = make_snapshot(owner, project, files)

    response = client_for(owner).post(
        f"/projects/{project.pk}/sweeps/new/", {"source": EXAMPLE, "code_snapshot": code.pk}
    )

    assert response.status_code == 302
    sweep = Sweep.objects.get()
    control_sweep(sweep.pk)
    first = sweep.trials.select_related("job").order_by("number").first()
    job = wait_for(first.job, JobState.SUCCEEDED, JobState.FAILED, timeout=240)
    assert job.state == JobState.SUCCEEDED, job.state_reason
    assert job.code_snapshot_id == code.pk
    control_sweep(sweep.pk)
    first.refresh_from_db()
    assert first.objective is not None and 0 < first.objective <= 1
