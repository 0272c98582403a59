import os

from django.apps import AppConfig


def forget_inherited_connections():
    """In a forked child (django-q's workers are forked from its cluster), drop the
    database connections and pools inherited from the parent without closing them: their
    sockets belong to the parent, and a pool's threads did not survive the fork. The
    child opens its own on first use."""
    from django.db import connections
    from django.db.backends.postgresql.base import DatabaseWrapper

    DatabaseWrapper._connection_pools.clear()
    for connection in connections.all(initialized_only=True):
        connection.connection = None


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Gantry core"

    def ready(self):
        from core import signals  # noqa: F401

        os.register_at_fork(after_in_child=forget_inherited_connections)
