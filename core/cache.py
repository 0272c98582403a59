"""Django's Redis cache with one connection pool (and client) per process.

Django keeps cache objects per context (`caches` is an asgiref Local). Under ASGI each
request is a new context, so each request built a new RedisCache, a new connection pool
and a new TCP connection to Redis (the load benchmark: 21 connections for 20 page
views), then dropped it. Sessions and the access cache read Redis on nearly every
request. Here the pools live as long as the process, shared by every request's cache
object; redis-py's pools are thread-safe and start afresh in a forked child.
"""

import threading

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedPoolRedisCacheClient(RedisCacheClient):
    _shared: dict = {}  # (servers, options) -> {server index: (pool, client)}
    _lock = threading.Lock()

    def __init__(self, servers, **options):
        super().__init__(servers, **options)
        key = (tuple(servers), repr(sorted(self._pool_options.items())))
        with self._lock:
            self._clients = self._shared.setdefault(key, {})

    def get_client(self, key=None, *, write=False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            with self._lock:
                client = self._clients.get(index)
                if client is None:
                    pool = self._pool_class.from_url(self._servers[index], **self._pool_options)
                    client = self._clients[index] = self._client(connection_pool=pool)
        return client


class SharedPoolRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedPoolRedisCacheClient
