import socket

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer

from tests.conftest import service_required


def test_configured_channel_layer_delivers_to_a_group():
    layer = get_channel_layer()

    async def roundtrip():
        channel = await layer.new_channel()
        await layer.group_add("job-1", channel)
        await layer.group_send("job-1", {"type": "log.lines", "lines": ["hello"]})
        message = await layer.receive(channel)
        await layer.group_discard("job-1", channel)
        return message

    assert async_to_sync(roundtrip)()["lines"] == ["hello"]


def redis_up():
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.services
def test_redis_channel_layer_crosses_layer_instances():
    """Two layer instances stand for the web server and a worker process."""
    service_required("Redis at 127.0.0.1:6379", redis_up())
    sender = RedisPubSubChannelLayer(hosts=["redis://127.0.0.1:6379/15"])
    receiver = RedisPubSubChannelLayer(hosts=["redis://127.0.0.1:6379/15"])

    async def roundtrip():
        channel = await receiver.new_channel()
        await receiver.group_add("job-2", channel)
        await sender.group_send("job-2", {"type": "status", "state": "running"})
        message = await receiver.receive(channel)
        await receiver.flush()
        await sender.flush()
        return message

    assert async_to_sync(roundtrip)()["state"] == "running"
