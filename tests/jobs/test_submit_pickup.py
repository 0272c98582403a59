"""A submit's kick is picked up soon after a quiet spell, on the embedded broker too.

django-q's ORM broker (the embedded default) sleeps `Q_CLUSTER["poll"]` seconds each time
it finds its queue empty, so the first kick after a quiet spell waited up to that long
(0.5 s: about half of submit -> running in bench/submit_latency.py). The real broker is
driven against the test database; its sleep is recorded, not slept (no timed assertions).
"""

import pytest
from django_q.brokers import orm

from jobs import tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def idle_broker(monkeypatch):
    slept = []
    monkeypatch.setattr(orm, "sleep", slept.append)
    broker = orm.ORM()
    broker.purge_queue()
    yield broker, slept
    broker.purge_queue()


def test_an_idle_orm_broker_looks_again_within_a_tenth_of_a_second(idle_broker):
    broker, slept = idle_broker
    assert broker.dequeue() is None
    assert len(slept) == 1 and 0 < slept[0] <= 0.1


def test_a_kick_made_while_idle_is_taken_at_the_next_look_without_sleeping(
    idle_broker, monkeypatch, settings
):
    broker, slept = idle_broker
    settings.REDIS_URL = ""  # the kick goes to the embedded ORM broker
    monkeypatch.setattr("django_q.tasks.get_broker", lambda *a, **k: broker)
    broker.dequeue()  # idle: one sleep
    tasks.kick()
    taken = broker.dequeue()
    assert taken is not None and len(taken) == 1
    assert len(slept) == 1  # found at once, no second sleep
