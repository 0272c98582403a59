"""What a cluster backend (Kubernetes) writes down about a launched job: where its attempt
went, that its objects exist, that the cluster still works on a worker, a worker the
cluster lost, and the node the cluster's scheduler really chose.

The backend never writes Job or JobWorker rows itself (and never changes a job's state):
it calls these, and `report_backend_problem` / `record_worker_status` / `settle_job` for
what ends an attempt. Every write is guarded by the attempt it is about, so a late report
of an attempt that is over changes nothing.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from django.db import transaction

from jobs import states
from jobs.models import Job, JobWorker
from jobs.services.lifecycle import WORKER_DONE, settle_job
from jobs.states import JobState


def record_attempt_target(job: Job, placement: dict, workers: dict[int, dict]) -> None:
    """Where the starting attempt's objects go (`placement`: cluster, namespace, object)
    and per-rank worker fields a notebook needs (host, port, notebook_token)."""
    merged = {**job.placement, **placement}
    Job.objects.filter(pk=job.pk, state=JobState.STARTING, attempt=job.attempt).update(
        placement=merged
    )
    job.placement = merged
    for rank, fields in workers.items():
        allowed = {k: v for k, v in fields.items() if k in ("host", "port", "notebook_token")}
        JobWorker.objects.filter(job=job, rank=rank, job__attempt=job.attempt).update(**allowed)


def attempt_statuses(attempts: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """Where each (job id, attempt) stands, in one query (a launch run's finished creates
    are reported together): "current" while it runs and nobody asked it to stop,
    "stopping" once a cancel or preemption was asked for, "over" when it ended (or
    another attempt runs)."""
    rows = {
        row["pk"]: row
        for row in Job.objects.filter(pk__in={pk for pk, _ in attempts}).values(
            "pk", "state", "attempt", "cancel_requested_at", "preempt_requested_at"
        )
    }
    found = {}
    for pk, attempt in attempts:
        row = rows.get(pk)
        if row is None or row["attempt"] != attempt or row["state"] not in states.LAUNCHED:
            found[(pk, attempt)] = "over"
        elif row["cancel_requested_at"] or row["preempt_requested_at"]:
            found[(pk, attempt)] = "stopping"
        else:
            found[(pk, attempt)] = "current"
    return found


def record_attempt_created(job: Job, attempt: int, where: str) -> None:
    """The attempt's objects exist in the cluster (`where`, e.g. k8s://cluster/ns/name):
    from now on their absence means they were deleted, not that they are coming."""
    JobWorker.objects.filter(job_id=job.pk, job__attempt=attempt).update(workdir=where[:500])


def keep_alive(job: Job, rank: int, now: datetime) -> None:
    """The cluster is still scheduling, pulling or creating for this worker: its executor
    has not started, so it cannot heartbeat, but nothing is lost."""
    JobWorker.objects.filter(
        job=job, rank=rank, job__attempt=job.attempt, state__in=("pending", "starting")
    ).update(last_heartbeat_at=now)


def record_worker_lost(job: Job, rank: int, reason: str) -> None:
    """The cluster stopped or lost a worker (evicted, its node gone): lost, then the job
    settles (retried while retries remain)."""
    JobWorker.objects.filter(job=job, rank=rank, job__attempt=job.attempt).exclude(
        state__in=WORKER_DONE
    ).update(state="lost", reason=reason[:500])
    settle_job(job)


def _free_ids(kind: str, node: str, count: int, job: Job, size: int) -> list[int]:
    """`count` GPU indices or CPU slots on `node` that no other admitted or launched job
    holds there (planned or recorded), from 0..size-1; where the cluster's scheduler has
    filled the node beyond Gantry's plan, ids of this job's own, outside every node's
    range (negative), so they never stand in another launch's way."""
    held: set[int] = set()
    others = (
        Job.objects.filter(state__in=(*states.LAUNCHED, JobState.ADMITTED), backend=job.backend)
        .filter(placement__nodes__has_key=node)  # only jobs with a worker there
        .exclude(pk=job.pk)
        .values_list("placement", flat=True)
    )
    for placement in others:
        hosts = placement.get("hosts") or {}
        for rank, ids in (placement.get(kind) or {}).items():
            if hosts.get(rank) == node:
                held.update(ids)
    free = [i for i in range(size) if i not in held]
    if len(free) >= count:
        return free[:count]
    return [-(job.pk * 1000 + k + 1) for k in range(count)]


def record_worker_node(job: Job, rank: int, node: str, sizes: dict[str, int]) -> None:
    """Where a worker really runs. Admission planned `placement["hosts"]` (rank -> node)
    and `placement["nodes"]` (node -> workers); on a cluster the cluster's scheduler has
    the last word, so the plan is corrected to what it did, and admission's accounting
    and the cluster page show the truth.

    A moved rank's GPU indices and CPU slots move with it (`sizes`: the node's GPUs and
    CPUs): on its new node it gets ids free there. Kept as planned, they would collide
    with those of jobs admitted onto that node. On a cluster they are counters, not
    devices (the device plugin picks the GPUs)."""
    key = str(rank)
    if (job.placement.get("hosts") or {}).get(key) == node:
        return
    # The ids free there are found before the write transaction (with SQLite's immediate
    # transactions it holds the database's one write lock): two moves onto one node at
    # the same moment may pick the same counters, which on a cluster blocks nothing.
    moved = {
        kind: _free_ids(kind, node, len(ids), job, sizes.get(kind, 0))
        for kind in ("gpus", "cpus")
        if (ids := (job.placement.get(kind) or {}).get(key))
    }
    with transaction.atomic():
        row = Job.objects.select_for_update().filter(pk=job.pk, attempt=job.attempt).first()
        if row is None:
            return
        placement = dict(row.placement)
        hosts = {**(placement.get("hosts") or {}), key: node}
        placement["hosts"] = hosts
        placement["nodes"] = dict(Counter(hosts.values()))
        for kind, ids in moved.items():
            if (placement.get(kind) or {}).get(key):
                placement[kind] = {**placement[kind], key: ids}
        Job.objects.filter(pk=job.pk).update(placement=placement)
        job.placement = placement
