"""The examples submitted to Gantry itself: the DDP script as a 2-worker distributed job
on the local backend, and the digits CNN as a train job whose loss reaches Gantry."""

import pytest
from django.urls import reverse

from jobs.models import Artifact, MetricPoint
from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.jobs.conftest import wait_for
from tests.jobs.test_examples import EXAMPLES, required_module

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _torch():
    required_module("torch")
    required_module("sklearn")


def test_ddp_example_runs_as_a_distributed_job_and_keeps_both_ranks_logs(running_jobs, owner, project):
    job = submit_job(
        owner, project, kind="distributed", workers=2, cpus=1, memory_mb=1024, name="ddp digits",
        command=f"python {EXAMPLES / 'train_digits_ddp.py'}", parameters={"epochs": 2},
    )
    wait_for(job, "succeeded", "failed", "lost", timeout=240)
    tail = "\n".join(line["text"] for line in log_lines(job, worker=1)[-15:])
    assert job.state == "succeeded", f"{job.state_reason}; worker 1's last lines:\n{tail}"
    for rank in (0, 1):
        text = "\n".join(line["text"] for line in log_lines(job, worker=rank, limit=100_000))
        assert f"rank {rank}" in text, f"rank {rank}'s log: {text[-500:]}"
    assert Artifact.objects.filter(job=job, worker=0, path="model.pt").exists()


def test_digits_example_reports_its_loss_to_gantry(running_jobs, owner, project, client_for):
    job = submit_job(
        owner, project, name="digits", command=f"python {EXAMPLES / 'train_digits.py'}", parameters={"epochs": 2},
    )
    wait_for(job, "succeeded", "failed", timeout=180)
    assert job.state == "succeeded", job.state_reason
    assert MetricPoint.objects.filter(job=job, name="loss").count() >= 2
    assert Artifact.objects.filter(job=job, path="model.pt").exists()
    # Its event files are where Gantry looks: the job page offers "Open TensorBoard".
    panel = client_for(owner).get(reverse("tensorboard_open", args=[job.pk]), {"panel": "1"})
    assert "Open TensorBoard" in panel.content.decode()
