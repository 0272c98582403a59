"""Admission kicks coalesce and kicked passes are spaced out, when the cache is shared.

Kicks go to the real django-q broker (the ORM on the SQLite pass, Redis on the other);
time.sleep is recorded instead of slept (no timed assertions)."""

import time

import pytest
from django.core.cache import cache
from django_q.brokers import get_broker

from jobs import tasks
from scheduling.tasks import admit_and_launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def broker(settings):
    # The coalescing needs a cache all processes share; in this one process the test's
    # cache stands in for Redis on the SQLite pass.
    settings.REDIS_URL = settings.REDIS_URL or "redis://shared-cache-stand-in"
    cache.delete_many([tasks.KICK_PENDING, tasks.LAST_KICKED_PASS])
    broker = get_broker()
    broker.purge_queue()
    yield broker
    broker.purge_queue()


def test_kicks_coalesce_until_the_pass_starts(broker):
    tasks.kick()
    tasks.kick()
    tasks.kick()
    assert broker.queue_size() == 1
    admit_and_launch(kicked=True)
    tasks.kick()  # after the pass started: needs a pass of its own
    assert broker.queue_size() == 2


def test_kicked_passes_wait_out_the_interval(broker, monkeypatch, settings):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)  # scheduling.tasks.time
    settings.GANTRY_ADMISSION_KICK_SECONDS = 5
    admit_and_launch(kicked=True)
    assert slept == []  # the first one runs at once
    admit_and_launch(kicked=True)
    assert len(slept) == 1 and 4 < slept[0] <= 5
    cache.set(tasks.LAST_KICKED_PASS, time.time() - 10)
    admit_and_launch(kicked=True)
    assert slept[1:] == [0.0]
    admit_and_launch()  # the scheduled pass never waits
    assert len(slept) == 2
