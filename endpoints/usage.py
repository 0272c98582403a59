"""When endpoints' replicas ran: the intervals usage reports count as replica-hours and
GPU-hours (telemetry asks through core.registry.service_usage).

The local backend (endpoints.local) opens an interval as it starts a replica process and
closes it as it stops one. On Kubernetes (endpoints.k8s) an interval is a Deployment's:
opened when Gantry applies it with replicas (`deployment_scaled`, its `replicas` the
count), closed when Gantry scales it to zero or deletes it, and reopened with the new
count when the count changes; the minute's pass squares the open ones with what the
cluster says (endpoints.k8s.scale_idle), so a Deployment deleted behind Gantry's back
stops counting within a minute. A replica also stops by itself (scaled to zero after its idle
time) or exits, with no Gantry process watching: the minute's pass
(`endpoints.tasks.record_replicas`, endpoints.local.record_replicas) marks each open
interval whose process still runs as seen, and closes the others when their process was
last heard of (its log's last write, never before it was last seen running nor after
now), so an interval's end is off by at most the pass's minute. An interval still open
counts until now, as a job still holding its GPUs does.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import DatabaseError, transaction
from django.db.models import Q

from endpoints.models import Endpoint, ReplicaInterval
from projects.permissions import restrict

logger = logging.getLogger(__name__)


def opened(
    endpoint_pk: int, replica: str, version_number, pid: int, process_start: int, at: datetime
) -> ReplicaInterval | None:
    """Open the interval of replica process (`pid`, `process_start`) started at `at`, with
    the endpoint's GPUs per replica; None when it is recorded already or the endpoint is
    gone. Written under the endpoint's row lock, as the traffic flush writes: a delete
    that locked it first (EndpointQuerySet.lock_for_delete) is waited for, and its
    endpoint left out. A failure is logged, never raised: the replica runs regardless
    (the next pass records it)."""
    try:
        with transaction.atomic():
            endpoint = _locked(endpoint_pk)
            process = {"replica": replica, "pid": pid, "process_start": process_start}
            if endpoint is None or ReplicaInterval.objects.filter(**process).exists():
                return None
            return _open(endpoint, endpoint_pk, version_number, at, **process)
    except DatabaseError as exc:
        logger.warning("endpoint %s: replica %s's start not recorded: %s", endpoint_pk, replica, exc)
        return None


def deployment_scaled(
    endpoint_pk: int, deployment: str, version_number, replicas: int, at: datetime
) -> None:
    """Kubernetes: the Deployment `deployment` of the endpoint now asks for `replicas`
    replicas. Its open interval is kept when it already counts these replicas (with the
    endpoint's GPUs per replica), else closed at `at`, and a new one opened where
    `replicas` > 0 and the endpoint still exists. Under the endpoint's row lock, as
    `opened`; raised errors are the caller's (it writes in the same transaction)."""
    with transaction.atomic():
        endpoint = _locked(endpoint_pk)
        current = list(open_deployments().filter(replica=deployment))
        keep = [
            i
            for i in current
            if endpoint and replicas and (i.replicas, i.gpus) == (replicas, endpoint["gpus"])
        ][:1]
        for interval in current:
            if interval not in keep:
                closed(interval, at)
        if keep or not replicas or endpoint is None:
            return
        _open(endpoint, endpoint_pk, version_number, at, replica=deployment, replicas=replicas)


def _locked(endpoint_pk: int) -> dict | None:
    """The endpoint's fields an interval copies, its row locked (None: it is gone)."""
    return (
        Endpoint.objects.select_for_update()
        .filter(pk=endpoint_pk)
        .values("project_id", "name", "created_by_id", "gpus")
        .first()
    )


def _open(endpoint: dict, endpoint_pk: int, version_number, at: datetime, **fields):
    """A new interval of the endpoint (`_locked`'s fields) from `at`, with the endpoint's
    GPUs per replica; `fields` say which replica (and, on Kubernetes, how many)."""
    return ReplicaInterval.objects.create(
        project_id=endpoint["project_id"],
        endpoint_id=endpoint_pk,
        endpoint_name=endpoint["name"],
        user_id=endpoint["created_by_id"],
        version_number=version_number,
        gpus=endpoint["gpus"],
        started_at=at,
        seen_at=at,
        **fields,
    )


def deployments_gone(names: list[str], at: datetime) -> None:
    """Kubernetes: these Deployments were scaled to zero or deleted; their intervals end."""
    for interval in open_deployments().filter(replica__in=names):
        closed(interval, at)


def open_deployments():
    """The open intervals of Kubernetes Deployments (no process: pid is None)."""
    return ReplicaInterval.objects.filter(ended_at=None, pid=None)


def open_intervals(replica: str | None = None):
    """The open intervals of processes on this machine (of one replica, if given)."""
    found = ReplicaInterval.objects.filter(ended_at=None, pid__isnull=False)
    return found.filter(replica=replica) if replica is not None else found


def closed(interval: ReplicaInterval, at: datetime) -> None:
    """Close `interval` at `at` (not before it was last seen running)."""
    ReplicaInterval.objects.filter(pk=interval.pk, ended_at=None).update(
        ended_at=max(at, interval.seen_at)
    )


def seen(pks: list[int], at: datetime) -> None:
    if pks:
        ReplicaInterval.objects.filter(pk__in=pks, ended_at=None).update(seen_at=at)


def service_usage(user, token, tenants, start: datetime, end: datetime) -> list[dict]:
    """core.registry.service_usage: the replica intervals of `tenants`' endpoints that
    overlap [start, end) and that the user (with `token`) may see (endpoint.view)."""
    intervals = (
        restrict(ReplicaInterval.objects.all(), user, "endpoint.view", token)
        .filter(project__tenant__in=tenants, started_at__lt=end)
        .filter(Q(ended_at=None) | Q(ended_at__gt=start))
        .order_by()
        .values_list(
            "project_id",
            "project__tenant__slug",
            "project__slug",
            "endpoint_name",
            "user__username",
            "started_at",
            "ended_at",
            "replicas",
            "gpus",
        )
    )
    return [
        {
            "kind": "endpoint",
            "id": (project_id, name),
            "tenant": tenant,
            "project": project,
            "user": username or "",
            "start": started,
            "end": ended,
            "replicas": replicas,
            "gpus": gpus,
        }
        for project_id, tenant, project, name, username, started, ended, replicas, gpus in (
            intervals
        )
    ]
