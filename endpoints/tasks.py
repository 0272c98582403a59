"""Endpoints' recurring work (core.schedules: `endpoints.replicas`, every minute)."""

from __future__ import annotations

from endpoints import k8s, local
from endpoints.models import Endpoint

SCHEDULES = {"endpoints.replicas": ("endpoints.tasks.record_replicas", 1)}


def record_replicas() -> dict:
    """When replicas ran, for usage reports: those that stopped by themselves (scaled to
    zero, exited) closed, those running seen (endpoints.local.record_replicas). A local
    replica scales itself to zero after its idle time; on Kubernetes this pass does it
    (endpoints.k8s.scale_idle, which also squares the Kubernetes replicas counted with the
    cluster's Deployments)."""
    done = local.record_replicas()
    if Endpoint.objects.filter(backend="kubernetes").exists():
        done.update(k8s.scale_idle())
    return done
