"""Gantry's own lines in a job's log (the idle warning and the stop): stored like the
executor's lines, numbered so the two never share a seq, served by the log API in order,
sent to live viewers, and the executor's own numbering (and resend de-duplication)
unchanged. No processes: ingestion is called as the executor API calls it."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone

from jobs.consumers import group_name, job_snapshot
from jobs.models import JobWorker
from jobs.services.ingestion import ingest_logs
from jobs.services.system_log import append_system_log
from telemetry.services import check_idle
from tests.telemetry.test_idle_policy import running, samples, short_policy  # noqa: F401

pytestmark = pytest.mark.django_db


def lines(first, n):
    return [{"seq": first + i, "stream": "stdout", "text": f"line {first + i}"} for i in range(n)]


def test_a_gantry_line_never_collides_with_the_executors(project, owner, api_for):
    job = running(project, owner)
    assert ingest_logs(job, 0, lines(1, 3)) == 3
    mine = append_system_log(job, "hello\nfrom  Gantry")
    assert mine["seq"] == 4 and mine["text"] == "[gantry] hello from Gantry"
    # The executor numbers on from 4; its lines are stored after Gantry's, none dropped.
    assert ingest_logs(job, 0, lines(4, 2)) == 5
    assert ingest_logs(job, 0, lines(3, 3)) == 5  # a resend: nothing stored twice
    api = api_for(owner)
    page = api.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    got = [(ln["seq"], ln["text"]) for ln in page["results"]]
    assert got == [
        (1, "line 1"),
        (2, "line 2"),
        (3, "line 3"),
        (4, "[gantry] hello from Gantry"),
        (5, "line 4"),
        (6, "line 5"),
    ]
    assert page["results"][3]["stream"] == "system"
    # Resuming after any seq (as `gantry logs -f` and the live socket do) gets each once.
    after = api.get(f"/api/v1/jobs/{job.pk}/logs/?after=3").json()["results"]
    assert [ln["seq"] for ln in after] == [4, 5, 6]
    before = api.get(f"/api/v1/jobs/{job.pk}/logs/?before=5").json()["results"]
    assert [ln["seq"] for ln in before] == [1, 2, 3, 4]
    # The live socket's poll compares stored seqs.
    assert job_snapshot(job.pk, [0], 0)[3] == {0: (6, 0)}
    assert JobWorker.objects.get(job=job).last_log_seq == 5  # the executor's numbering


def test_a_job_without_the_worker_gets_nothing(project, owner):
    job = running(project, owner)
    assert append_system_log(job, "x", rank=3) is None
    assert not job.log_chunks.exists()


def test_live_viewers_get_the_line(project, owner, django_capture_on_commit_callbacks):
    job = running(project, owner)
    with django_capture_on_commit_callbacks() as callbacks:
        append_system_log(job, "watch this")

    async def listen_then_commit():
        # One event loop for subscribe and receive: the Redis pub/sub layer (the
        # PostgreSQL pass) keeps a channel only in the loop that created it.
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group_name(job.pk), channel)
        for callback in callbacks:
            await sync_to_async(callback)()
        return await asyncio.wait_for(layer.receive(channel), 30)

    message = async_to_sync(listen_then_commit)()
    assert message["type"] == "job.lines" and message["first"] == message["last"] == 1
    assert json.loads(message["json"])[0]["text"] == "[gantry] watch this"


def test_the_idle_warning_and_the_stop_are_lines_of_the_log(project, owner, api_for):
    job = running(project, owner)
    ingest_logs(job, 0, lines(1, 2))
    samples(job, [0] * 11)
    now = timezone.now()
    assert check_idle(now)["warned"] == 1
    samples(job, [0], every=timedelta(0))
    assert check_idle(now + timedelta(minutes=5))["stopped"] == 1
    got = api_for(owner).get(f"/api/v1/jobs/{job.pk}/logs/?after=2").json()["results"]
    texts = [ln["text"] for ln in got]
    assert len(texts) == 2, texts
    assert texts[0].startswith("[gantry] GPU utilization below 10% for 10 minutes: ")
    assert "will be stopped at" in texts[0]
    assert texts[1].startswith("[gantry] stopped by the idle-GPU policy: GPU utilization below")
