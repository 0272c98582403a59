"""Real processes: a job that points its checkpoint folder at another tenant's checkpoint
on the host gets nothing of it uploaded (issue 38). The job (sandboxed where this machine
can) makes the link; the executor outside it, as root, must never follow it."""

import textwrap

import pytest

from checkpoints.models import Checkpoint
from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.jobs.conftest import wait_for, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEAL = """
    import os, executor
    root = os.environ["GANTRY_CHECKPOINT_DIR"]
    os.makedirs(root, exist_ok=True)
    os.symlink(VICTIM, os.path.join(root, "steal"))  # the host path, read in mountinfo
    os.makedirs("scratch", exist_ok=True)
    open("scratch/w.bin", "wb").write(b"my own weights")
    executor.checkpoint("scratch", step=1)
    print("linked and saved", flush=True)
"""


def test_a_checkpoint_folder_linked_to_another_tenants_checkpoint_uploads_nothing_of_it(
    running_jobs, owner, project, tmp_path
):
    victim = tmp_path.parent / f"{tmp_path.name}-data" / "tenant-a" / "checkpoints" / "step-000000100"
    victim.mkdir(parents=True)
    (victim / "weights.bin").write_bytes(b"tenant A's weights")
    (victim / ".complete").write_text('{"step": 100}')
    script = tmp_path / "steal.py"
    script.write_text(textwrap.dedent(STEAL.replace("VICTIM", repr(str(victim)))))

    job = submit_job(owner, project, name="steal", command=f"python {script}")
    wait_for(job, "succeeded", "failed", timeout=120, reconcile=True)
    wait_until(lambda: Checkpoint.objects.complete().filter(job=job).exists(), 60, "its own checkpoint")

    log = "\n".join(line["text"] for line in log_lines(job, worker=0, limit=10_000))
    assert job.state == "succeeded", (job.state_reason, log[-2000:])
    assert list(Checkpoint.objects.filter(job=job).values_list("name", flat=True)) == ["step-000000001"]
    assert "checkpoint 'steal' ignored" in log
