"""core.cache.SharedPoolRedisCache against the local Redis: every request's cache object
(Django makes one per request under ASGI) uses the process's one pool, so a stream of
requests opens no new connections."""

import socket

import pytest
import redis

from core.cache import SharedPoolRedisCache
from tests.conftest import service_required

URL = "redis://127.0.0.1:6379/14"


@pytest.fixture
def server():
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
        up = True
    except OSError:
        up = False
    service_required("Redis", up)
    admin = redis.Redis.from_url(URL)
    admin.flushdb()
    yield admin
    admin.flushdb()
    admin.close()


def connections_received(admin) -> int:
    return admin.info("stats")["total_connections_received"]


def test_request_after_request_opens_no_new_connection(server):
    SharedPoolRedisCache(URL, {}).set("k", {"v": 1})  # the process's first use connects
    before = connections_received(server)
    for _ in range(30):  # what 30 requests did: a cache object each
        assert SharedPoolRedisCache(URL, {}).get("k") == {"v": 1}
    assert connections_received(server) == before


def test_one_client_per_server_and_options(server):
    first, second = SharedPoolRedisCache(URL, {}), SharedPoolRedisCache(URL, {})
    assert first._cache.get_client() is second._cache.get_client()
    other = SharedPoolRedisCache("redis://127.0.0.1:6379/13", {})
    assert other._cache.get_client() is not first._cache.get_client()
    first.set("k", 1)
    assert other.get("k") is None  # another database: nothing shared but the process
