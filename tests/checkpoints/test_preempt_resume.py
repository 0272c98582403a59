"""Real processes (the local backend's executors and a pure-Python training loop): a job
preempted mid-run saves a checkpoint inside its save window, and the requeued run resumes
from it; an executor killed while it uploads a checkpoint leaves nothing listed or staged."""

import signal
import textwrap

import pytest

from checkpoints import executor_api
from checkpoints.models import Checkpoint
from checkpoints.services import latest_complete
from jobs.compute import get_backend
from jobs.models import JobWorker
from jobs.queries import log_lines
from jobs.services.lifecycle import preempt_job
from jobs.services.submit import submit_job
from tests.jobs.conftest import wait_for, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The "model": y = 3x + 1 fitted by SGD, one sample per step, deterministic, so a run
# preempted and resumed from its checkpoints must end with the uninterrupted run's weights.
SGD = """
def sgd(w, b, step):
    x = (step % 10) / 10
    err = w * x + b - (3 * x + 1)
    return w - 0.05 * err * x, b - 0.05 * err
"""

TRAIN = SGD + """
import json, os, sys, time
import executor

total, every = 400, 25
step, w, b = 0, 0.0, 0.0
resume = executor.resume_from()
if resume:
    with open(os.path.join(resume, "state.json")) as fh:
        step, w, b = json.load(fh)
    print(f"resumed from step {step}", flush=True)

def save(step):
    os.makedirs("scratch", exist_ok=True)
    with open("scratch/state.json", "w") as fh:
        json.dump([step, w, b], fh)
    executor.checkpoint("scratch", step=step, metrics={"w": w})

while step < total:
    step += 1
    w, b = sgd(w, b, step)
    time.sleep(0.02)
    print(f"step {step}", flush=True)
    if executor.preemption_requested():
        save(step)
        print(f"saved step {step} on preemption", flush=True)
        sys.exit(0)
    if step % every == 0:
        save(step)
print(f"finished at step {step}: w={w!r} b={b!r}", flush=True)
"""


def uninterrupted_weights() -> str:
    scope: dict = {}
    exec(SGD, scope)
    w = b = 0.0
    for step in range(1, 401):
        w, b = scope["sgd"](w, b, step)
    return f"w={w!r} b={b!r}"


def text(job):
    return "\n".join(line["text"] for line in log_lines(job, worker=0, limit=100_000))


def test_preempted_job_checkpoints_in_its_save_window_and_resumes(running_jobs, owner, project, tmp_path, settings):
    settings.GANTRY_PREEMPT_SAVE_SECONDS = 60
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    job = submit_job(owner, project, name="loop", command=f"python {script}")
    wait_for(job, "running", "failed", timeout=60)
    wait_until(lambda: Checkpoint.objects.complete().filter(job=job).exists(), 60, "a periodic checkpoint")

    preempt_job(job, "preempted by the test")
    wait_until(
        lambda: Checkpoint.objects.complete().filter(job=job, on_preemption=True).exists(),
        60,
        "the checkpoint saved on preemption",
    )
    wait_for(job, "succeeded", "failed", "lost", timeout=120, reconcile=True)
    # The last one the first attempt committed after the preemption request: the loop's save
    # on noticing it (read once the job ended: a periodic save uploading when the request came
    # is flagged too and may commit first).
    saved = (
        Checkpoint.objects.filter(job=job, attempt=1, on_preemption=True).order_by("-step").first()
    )
    job.refresh_from_db()
    assert job.state == "succeeded", (job.state_reason, text(job)[-2000:])
    assert job.preemptions == 1
    log = text(job)
    # Saved before SIGTERM (the window let the loop notice the preempt file and exit itself).
    assert f"saved step {saved.step} on preemption" in log
    window = log.split("preempted: the command has 60 s", 1)[1]
    assert "sending SIGTERM" not in window.split("job finished")[0]
    assert f"resumed from step {saved.step}" in log
    # The resumed model is the uninterrupted run's (same weights, bit for bit).
    assert f"finished at step 400: {uninterrupted_weights()}" in log
    assert log.count("\nstep 1\n") + log.startswith("step 1\n") <= 1  # never started over
    assert latest_complete(job).step >= saved.step


KILLED = """
    import os, sys, time
    print("resume from:", os.environ.get("GANTRY_RESUME_FROM"), flush=True)
    if os.environ.get("GANTRY_RESUME_FROM") or os.path.exists(FLAG):
        sys.exit(0)
    folder = os.path.join(os.environ["GANTRY_CHECKPOINT_DIR"], "big")
    os.makedirs(folder)
    for i in range(40):
        with open(os.path.join(folder, f"shard-{i:02d}.bin"), "wb") as fh:
            fh.write(os.urandom(64 * 1024))
    open(os.path.join(folder, ".complete"), "w").close()
    time.sleep(120)
"""


def test_executor_killed_mid_upload_leaves_nothing_listed_or_staged(
    running_jobs, owner, project, tmp_path, monkeypatch
):
    flag = tmp_path / "killed"
    script = tmp_path / "big.py"
    script.write_text(textwrap.dedent(KILLED.replace("FLAG", repr(str(flag)))))
    job = submit_job(owner, project, name="big", command=f"python {script}", max_retries=1)
    real_receive = executor_api.receive_file
    received = []

    def receive_then_kill(checkpoint, path, stream, sha256):
        entry = real_receive(checkpoint, path, stream, sha256)
        received.append(path)
        if len(received) == 3:  # the executor dies with 37 files still to send
            flag.write_text("")
            for worker in JobWorker.objects.filter(job=checkpoint.job):
                get_backend(checkpoint.job.backend)._signal(checkpoint.job, [worker.rank], signal.SIGKILL)
        return entry

    monkeypatch.setattr(executor_api, "receive_file", receive_then_kill)
    wait_for(job, "running", "failed", timeout=60)
    wait_until(lambda: flag.exists(), 60, "the upload to start")
    pending = Checkpoint.objects.get(job=job, name="big")
    assert pending.state == "pending"
    assert pending.files.filter(blob__isnull=False).count() == 3

    wait_for(job, "succeeded", "failed", "lost", timeout=120, reconcile=True)
    job.refresh_from_db()
    assert job.attempt == 2 and job.state == "succeeded", job.state_reason
    assert not Checkpoint.objects.complete().filter(job=job).exists()
    assert latest_complete(job) is None
    assert "resume from: None" in text(job)
    assert "resuming from checkpoint" not in text(job)
