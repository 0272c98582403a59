"""Endpoints' recurring work (core.schedules: `endpoints.replicas`, every minute)."""

from __future__ import annotations

from endpoints import local

SCHEDULES = {"endpoints.replicas": ("endpoints.tasks.record_replicas", 1)}


def record_replicas() -> dict:
    """When replicas ran, for usage reports: those that stopped by themselves (scaled to
    zero, exited) closed, those running seen (endpoints.local.record_replicas)."""
    return local.record_replicas()
