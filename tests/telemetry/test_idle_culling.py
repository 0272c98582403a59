"""Idle culling by real use, end to end: real executors on the local backend sample a GPU
through the real NVML binding; the GPU is the fake NVML library (conftest.py), which
stands in for hardware and whose utilization the test scripts. A job whose GPU stays idle
(a notebook) is warned, then stopped with the reason; a notebook whose GPU is busy, with
no browser traffic at all, keeps running. Policy minutes are shortened through the settings."""

from __future__ import annotations

import time

import pytest

from jobs.compute import reset_backends
from jobs.models import Job
from jobs.queries import log_lines
from jobs.services.submit import submit_job
from jobs.signals import job_alert
from telemetry.models import IdleWatch
from telemetry.services import UTILIZATION, check_idle, gpu_points
from tests.jobs.conftest import wait_for, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fake_nvml")]

SLEEPER = "python -c 'import time; time.sleep(120)'"


@pytest.fixture
def gpu_jobs(running_jobs, job_settings, fake_nvml, monkeypatch):
    """One (fake) GPU on this machine, sampled every 0.2 s; idle means below 10% for 3 s,
    stopped 3 s after the warning; the policy covers every job kind."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml.directory))
    monkeypatch.setenv("GANTRY_GPU_SAMPLE_SECONDS", "0.2")
    job_settings.GANTRY_LOCAL_FAKE_GPUS = 1
    job_settings.GANTRY_GPU_IDLE_PERCENT = 10
    job_settings.GANTRY_GPU_IDLE_MINUTES = 0.05
    job_settings.GANTRY_GPU_IDLE_GRACE_MINUTES = 0.05
    job_settings.GANTRY_GPU_IDLE_KINDS = "all"
    job_settings.GANTRY_NOTEBOOK_IDLE_MINUTES = 0  # request traffic would have stopped it
    reset_backends()
    alerts = []

    def heard(sender, job, kind, message, **kwargs):
        alerts.append((job.pk, kind, message))

    job_alert.connect(heard, weak=False)
    yield fake_nvml, alerts
    job_alert.disconnect(heard)


def start_gpu_job(owner, project, name, **spec):
    spec.setdefault("command", SLEEPER)
    job = submit_job(owner, project, name=name, gpus=1, memory_mb=1024, **spec)
    wait_for(job, "running", timeout=120)
    wait_until(
        lambda: gpu_points(UTILIZATION).filter(job=job).count() >= 3,
        what="the executor's GPU samples",
    )
    return job


def test_an_idle_gpu_notebook_is_warned_then_stopped_with_the_reason(gpu_jobs, owner, project):
    fake, alerts = gpu_jobs
    fake.set((0, 500, 30000, 35))  # allocated, doing nothing
    job = start_gpu_job(owner, project, "forgotten", kind="notebook", command="")
    assert list(gpu_points(UTILIZATION).filter(job=job).values_list("value", flat=True)[:3]) == [
        0.0,
        0.0,
        0.0,
    ]

    def warned():
        check_idle()
        return IdleWatch.objects.filter(job=job).exists()

    wait_until(warned, timeout=30, what="the idle warning")
    watch = IdleWatch.objects.get(job=job)
    assert "GPU utilization below 10% for 0.05 minutes" in watch.message
    wait_until(lambda: alerts, timeout=5, what="the idle_warning alert")
    assert alerts[0][:2] == (job.pk, "idle_warning")
    job.refresh_from_db()
    assert job.state == "running"  # the grace period first

    def stopped():
        check_idle()
        return IdleWatch.objects.get(job=job).stopped_at is not None

    wait_until(stopped, timeout=30, what="the stop after the grace period")
    wait_for(job, "cancelled", reconcile=True)
    assert job.state_reason.startswith(
        "stopped by the idle-GPU policy: GPU utilization below 10% for 0.05 minutes"
    ), job.state_reason
    assert job.events.filter(reason__contains="idle-GPU policy").exists()
    # Gantry's lines in the job's own log, numbered among the executor's (system stream).
    stored = log_lines(job)
    assert [ln["seq"] for ln in stored] == list(range(1, len(stored) + 1))
    idle = [ln["text"] for ln in stored if "below 10% for 0.05 minutes" in ln["text"]]
    assert idle[0].startswith("[gantry] GPU utilization below 10% for 0.05 minutes: "), idle
    assert idle[1].startswith("[gantry] stopped by the idle-GPU policy: "), idle


def test_a_busy_gpu_notebook_with_its_tab_closed_keeps_running(gpu_jobs, owner, project):
    """Request traffic would have stopped it (GANTRY_NOTEBOOK_IDLE_MINUTES=0, nobody has
    opened it): a GPU notebook is judged by its GPU, which is busy."""
    fake, alerts = gpu_jobs
    fake.set((85, 30000, 250000, 70))
    job = start_gpu_job(owner, project, "long computation", kind="notebook", command="")
    assert job.last_activity_at is None
    deadline = time.monotonic() + 8  # longer than idle (3 s) + grace (3 s)
    while time.monotonic() < deadline:
        check_idle()
        wait_for(job, "running", reconcile=True)
        time.sleep(0.3)
    assert not IdleWatch.objects.filter(job=job).exists()
    assert alerts == []
    assert Job.objects.get(pk=job.pk).state == "running"
