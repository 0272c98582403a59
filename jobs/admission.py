"""Admission: which queued jobs start now, given the backend's free capacity.

The policy is one pure function, `first_come_first_served`, over plain values;
the scheduler issue swaps in `jobs.scheduler` (quotas, fair share, backfill)
behind the same call in `admission_pass`.

Every pass rewrites the reason of each job it leaves waiting, so a queued job
always says why it waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils import timezone

from jobs.backends import get_backend
from jobs.models import Job
from jobs.states import ACTIVE, JobState, transition

ADMISSION_LOCK = 0x6A6F6273  # "jobs"


@dataclass
class Free:
    """What is free on a backend right now: counts, plus which GPUs and CPU slots."""

    cpus: int
    memory_mb: int
    gpu_indices: list[int] = field(default_factory=list)
    cpu_slots: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    job_id: int
    workers: int
    gpus: int
    cpus: int
    memory_mb: int


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def shortfall(req: Request, free: Free, where: str) -> str | None:
    """Why `req` does not fit in `free` (gang: all workers or none), or None."""
    n = req.workers
    gang = f" ({n} workers)" if n > 1 else ""
    if req.gpus * n > len(free.gpu_indices):
        return (
            f"waiting for {_plural(req.gpus * n, 'GPU')}{gang}: "
            f"{len(free.gpu_indices)} free {where}"
        )
    if req.cpus * n > free.cpus:
        return f"waiting for {_plural(req.cpus * n, 'CPU')}{gang}: {free.cpus} free {where}"
    if req.memory_mb * n > free.memory_mb:
        return (
            f"waiting for {req.memory_mb * n} MiB of memory{gang}: "
            f"{free.memory_mb} MiB free {where}"
        )
    return None


def first_come_first_served(
    queue: list[Request], free: Free, where: str
) -> tuple[dict[int, dict], dict[int, str]]:
    """Admit jobs in queue order until one does not fit; everyone behind it waits.

    Strict FCFS: a big job at the head is never starved by small ones behind it.
    Returns ({job id: placement}, {job id: reason it waits}).
    """
    admitted: dict[int, dict] = {}
    waiting: dict[int, str] = {}
    blocked_by = None
    for position, req in enumerate(queue, start=1):
        if blocked_by is not None:
            waiting[req.job_id] = f"position {position} in queue (behind job #{blocked_by})"
            continue
        problem = shortfall(req, free, where)
        if problem:
            waiting[req.job_id] = problem
            blocked_by = req.job_id
            continue
        placement = {"gpus": {}, "cpus": {}}
        for rank in range(req.workers):
            placement["gpus"][str(rank)] = free.gpu_indices[: req.gpus]
            del free.gpu_indices[: req.gpus]
            placement["cpus"][str(rank)] = free.cpu_slots[: req.cpus]
            del free.cpu_slots[: req.cpus]
        free.cpus -= req.cpus * req.workers
        free.memory_mb -= req.memory_mb * req.workers
        admitted[req.job_id] = placement
    return admitted, waiting


def free_capacity(backend) -> Free:
    capacity = backend.capacity()
    used_gpus: set[int] = set()
    used_slots: set[int] = set()
    cpus = capacity.cpus
    memory = capacity.memory_mb
    active = Job.objects.filter(state__in=ACTIVE, backend=backend.name).only(
        "cpus", "memory_mb", "workers", "placement"
    )
    for job in active:
        cpus -= job.cpus * job.workers
        memory -= job.memory_mb * job.workers
        for indices in (job.placement.get("gpus") or {}).values():
            used_gpus.update(indices)
        for slots in (job.placement.get("cpus") or {}).values():
            used_slots.update(slots)
    return Free(
        cpus=max(cpus, 0),
        memory_mb=max(memory, 0),
        gpu_indices=[g.index for g in capacity.gpus if g.index not in used_gpus],
        cpu_slots=[s for s in range(capacity.cpus) if s not in used_slots],
    )


def _serialize_passes() -> None:
    """Two passes at once could each see the same free GPU. SQLite's IMMEDIATE
    transactions already serialize writers; PostgreSQL needs an advisory lock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADMISSION_LOCK])


@transaction.atomic
def admission_pass(backend=None) -> list[Job]:
    """One pass over the queue: admit what fits, explain the rest. Returns admitted jobs."""
    backend = backend or get_backend()
    _serialize_passes()
    queue = list(
        Job.objects.filter(state=JobState.QUEUED, backend=backend.name).order_by(
            "-priority", "queued_at", "pk"
        )
    )
    if not queue:
        return []
    requests = [Request(j.pk, j.workers, j.gpus, j.cpus, j.memory_mb) for j in queue]
    admitted, waiting = first_come_first_served(requests, free_capacity(backend), backend.where)
    done = []
    for job in queue:
        if job.pk in admitted:
            if transition(
                job,
                JobState.ADMITTED,
                f"admitted {backend.where}",
                placement=admitted[job.pk],
                admitted_at=timezone.now(),
            ):
                done.append(job)
        elif waiting.get(job.pk) and waiting[job.pk] != job.state_reason:
            Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
                state_reason=waiting[job.pk]
            )
    return done
