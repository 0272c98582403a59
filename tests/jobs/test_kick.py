"""Admission kicks coalesce and kicked passes are spaced out, when the cache is shared.

The broker call is recorded instead of made (what is asserted is which kicks reach it),
and time.sleep is recorded instead of slept (no timed assertions)."""

import time

import pytest
from django.core.cache import cache

from jobs import tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch, settings):
    settings.REDIS_URL = settings.REDIS_URL or "redis://shared-cache-stand-in"
    cache.delete_many([tasks.KICK_PENDING, tasks.LAST_KICKED_PASS])
    calls = []
    monkeypatch.setattr("django_q.tasks.async_task", lambda *a, **kw: calls.append(kw))
    return calls


def test_kicks_coalesce_until_the_pass_starts(queued):
    tasks.kick()
    tasks.kick()
    tasks.kick()
    assert len(queued) == 1 and queued[0]["kicked"] is True
    tasks.admit_and_launch(kicked=True)
    tasks.kick()  # after the pass started: needs a pass of its own
    assert len(queued) == 2


def test_kicked_passes_wait_out_the_interval(queued, monkeypatch, settings):
    slept = []
    monkeypatch.setattr(tasks.time, "sleep", slept.append)
    settings.GANTRY_ADMISSION_KICK_SECONDS = 5
    tasks.admit_and_launch(kicked=True)
    assert slept == []  # the first one runs at once
    tasks.admit_and_launch(kicked=True)
    assert len(slept) == 1 and 4 < slept[0] <= 5
    cache.set(tasks.LAST_KICKED_PASS, time.time() - 10)
    tasks.admit_and_launch(kicked=True)
    assert slept[1:] == [0.0]
    tasks.admit_and_launch()  # the scheduled pass never waits
    assert len(slept) == 2
