"""The idle policy's decisions, on recorded samples (no processes: the jobs' states are
written as the state machine would have left them), and the pages that show GPU use."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from jobs.models import Job, JobWorker
from jobs.services.ingestion import ingest_metrics
from telemetry.models import IdlePolicy, IdleWatch
from telemetry.services import check_idle, refresh_usage, set_idle_policy

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def short_policy(settings):
    settings.GANTRY_GPU_IDLE_PERCENT = 10
    settings.GANTRY_GPU_IDLE_MINUTES = 10
    settings.GANTRY_GPU_IDLE_GRACE_MINUTES = 5
    settings.GANTRY_GPU_IDLE_KINDS = "notebook"
    settings.GANTRY_NOTEBOOK_IDLE_MINUTES = 30


def running(project, user, kind="notebook", gpus=1, minutes=20):
    now = timezone.now()
    job = Job.objects.create(
        project=project,
        created_by=user,
        name=f"{kind}-job",
        kind=kind,
        gpus=gpus,
        state="running",
        admitted_at=now - timedelta(minutes=minutes),
        started_at=now - timedelta(minutes=minutes),
    )
    JobWorker.objects.create(job=job, rank=0, state="running")
    return job


def samples(job, percents, every=timedelta(minutes=1)):
    """Utilization samples ending now, as the executor ships them."""
    worker = JobWorker.objects.get(job=job)
    now = timezone.now()
    first = worker.last_metric_seq + 1
    ingest_metrics(
        job,
        0,
        [
            {
                "seq": first + i,
                "name": "gpu0/utilization",
                "value": p,
                "ts": (now - every * (len(percents) - 1 - i)).timestamp(),
            }
            for i, p in enumerate(percents)
        ],
    )


def test_an_idle_gpu_notebook_is_warned_once_then_stopped_after_the_grace(project, owner):
    job = running(project, owner)
    samples(job, [0, 2, 1, 0, 3, 0, 0, 1, 0, 0, 0])
    now = timezone.now()
    assert check_idle(now)["warned"] == 1
    assert check_idle(now + timedelta(minutes=1)) == {"warned": 0, "stopped": 0, "withdrawn": 0}
    watch = IdleWatch.objects.get(job=job)
    assert "below 10% for 10 minutes" in watch.message
    assert watch.stop_at == now + timedelta(minutes=5)
    assert job.events.filter(reason__startswith="warned: GPU utilization below 10%").count() == 1
    samples(job, [0], every=timedelta(0))
    assert check_idle(now + timedelta(minutes=5))["stopped"] == 1
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    assert job.state_reason.startswith("stopped by the idle-GPU policy: GPU utilization below 10%")


def test_a_job_that_gets_to_work_is_no_longer_warned(project, owner):
    job = running(project, owner)
    samples(job, [0] * 11)
    check_idle()
    assert IdleWatch.objects.filter(job=job).exists()
    samples(job, [95], every=timedelta(0))
    assert check_idle()["withdrawn"] == 1
    assert not IdleWatch.objects.filter(job=job).exists()


def test_the_default_policy_leaves_training_jobs_alone_a_project_policy_reaches_them(
    project, owner
):
    job = running(project, owner, kind="train")
    samples(job, [0] * 11)
    assert check_idle()["warned"] == 0
    set_idle_policy(
        owner,
        project,
        enabled=True,
        threshold_percent=5,
        idle_minutes=5,
        grace_minutes=1,
        kinds="all",
    )
    assert check_idle()["warned"] == 1
    assert AuditEvent.objects.filter(action="telemetry.idle_policy").exists()
    IdlePolicy.objects.filter(project=project).update(enabled=False)
    assert check_idle()["withdrawn"] == 1


def test_a_gpu_notebook_without_telemetry_falls_back_to_request_traffic(project, owner):
    running(project, owner, minutes=40)
    assert check_idle()["warned"] == 1  # 40 minutes without requests, no samples at all
    other = running(project, owner, minutes=40)
    Job.objects.filter(pk=other.pk).update(last_activity_at=timezone.now())
    assert not IdleWatch.objects.filter(job=other).exists()
    assert check_idle()["warned"] == 0


def test_pages_show_what_the_gpus_do(project, owner, member, outsider, client):
    job = running(project, owner)
    samples(job, [40, 60], every=timedelta(seconds=20))
    refresh_usage()
    client.force_login(member)
    listed = client.get(reverse("jobs:job_list")).content.decode()
    assert "GPU 50% now · 50% avg" in listed
    cluster = client.get(reverse("scheduling:overview")).content.decode()
    assert f"#{job.pk} notebook-job" in cluster and "50%" in cluster
    series = client.get(reverse("telemetry:job_gpu_series", args=[job.pk])).json()
    assert series["utilization"]["labels"] == ["gpu0"]
    assert series["utilization"]["y"] == [[40.0, 60.0]]
    idle = running(project, owner)
    samples(idle, [0] * 11)
    check_idle()
    page = client.get(idle.get_absolute_url()).content.decode()
    assert 'id="gpu-idle-warning"' in page and "unless its GPUs get to work" in page
    client.force_login(outsider)
    assert client.get(reverse("telemetry:job_gpu_series", args=[job.pk])).status_code == 404


def test_only_maintainers_change_the_idle_policy(project, owner, member, client):
    url = reverse("telemetry:idle_policy_edit", args=[project.pk])
    client.force_login(member)
    assert client.get(url).status_code == 403
    client.force_login(owner)
    response = client.post(
        url,
        {
            "enabled": "on",
            "threshold_percent": "150",
            "idle_minutes": "30",
            "grace_minutes": "5",
            "kinds": "all",
        },
    )
    assert response.status_code == 400 and not IdlePolicy.objects.exists()
    response = client.post(
        url,
        {
            "enabled": "on",
            "threshold_percent": "15",
            "idle_minutes": "30",
            "grace_minutes": "5",
            "kinds": "all",
        },
    )
    assert response.status_code == 302
    assert IdlePolicy.objects.get(project=project).threshold_percent == 15
