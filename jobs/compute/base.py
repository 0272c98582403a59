"""The interface every execution backend implements.

A backend owns processes (or pods); the database owns state. Backends never
change a job's state themselves: they launch, signal and inspect, and report
what they saw to the services, which call `jobs.states.transition`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Node:
    """One machine jobs can be placed on, with its whole capacity for jobs. Admission
    hands these to the scheduling policy (whose `Node` has the same fields)."""

    name: str
    gpus: int
    cpus: float
    memory_mb: int
    gpu_model: str = ""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str = ""
    memory_mb: int = 0


@dataclass(frozen=True)
class Capacity:
    """What a backend can run at once (totals, not what is free)."""

    cpus: int
    memory_mb: int
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


@dataclass
class WorkerProbe:
    """What the backend sees of one worker's processes right now."""

    rank: int
    alive: bool
    detail: str = ""
    rss_mb: int | None = None


class Backend:
    name = ""
    # Words for state reasons: "0 of 2 free on this machine".
    where = "on this backend"

    def capacity(self) -> Capacity:
        raise NotImplementedError

    def nodes(self) -> list[Node]:
        """The machines jobs can be placed on, as the scheduling policy sees them.

        Admission builds its `scheduling.policy.data.Snapshot` from these once per pass: every
        worker of a job lands on one node, and a job's `placement["nodes"]` maps node
        names to worker counts. Report each node's whole capacity for jobs (Kubernetes:
        allocatable), not what is free now: admission subtracts Gantry's active jobs
        itself. Names must be stable across restarts.
        """
        raise NotImplementedError

    def launch(self, job, token_for_rank) -> None:
        """Start every worker of an admitted job. `token_for_rank(rank)` gives each
        worker's executor token. Records pids etc. on the JobWorker rows."""
        raise NotImplementedError

    def cancel(self, job, ranks=None) -> None:
        """Ask the executors of a job (or of some ranks) to stop (SIGTERM or equivalent)."""
        raise NotImplementedError

    def kill(self, job, ranks=None) -> None:
        """Stop a job's processes at once (lost, memory limit, backstops)."""
        raise NotImplementedError

    def probe(self, job) -> list[WorkerProbe]:
        """Look at the processes of a launched job (reconcile / adopt)."""
        raise NotImplementedError

    def adopt(self, job) -> list[WorkerProbe]:
        """After a restart of the worker: take over the job's processes that still
        exist. Returns the probes; the caller marks the job lost if some are gone."""
        return self.probe(job)

    def notebook_command(self, job, worker) -> list[str]:
        raise NotImplementedError
