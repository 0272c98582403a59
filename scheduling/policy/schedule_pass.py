"""Gantry's GPU scheduling policy: a pure function from a cluster snapshot to a decision.

No Django, no I/O, no clocks: the live scheduler and the trace simulator call the very same
``schedule(snapshot, now)`` once per scheduling pass.

Policy, in order of application (see ``schedule``):

1. **Ranking** (``_Ranker``). Pending jobs are ordered by priority (higher first). The
   oldest ``fifo_tail_fraction`` (a fifth) of the queue comes next, in submit order: the
   tail guard (relative, so it stays a guard on a busy cluster where every job has waited
   hours; ``fifo_age_s`` adds an absolute age, off by default). The
   rest are ordered by a *virtual time*: highest response ratio next, ``now -
   response_ratio_s x (waited + e) / e`` with ``e`` the job's estimate (its timeout; at least
   ``min_estimate_s``; a job without one counts as the queue's median estimate), so short
   jobs go first and long ones catch up as they wait; plus ``fair_share_s`` per doubling of
   the tenant's attained service over its share (decayed GPU usage + GPUs running now,
   including jobs admitted earlier in the pass, over weight x guaranteed GPUs; by default a
   tie-breaker, 60 s per doubling: larger weights measured worse JCT and p95 wait on the
   Philly windows without raising Jain's index); minus ``guarantee_boost_s`` (default 0)
   while the job fits in its tenant's guarantee. A tenant's *pending* jobs do not count against it, so
   submitting many short jobs costs nothing. A preempted job keeps its submit time, hence
   its place. (``response_ratio_s = 0`` selects an additive runtime term instead.)
2. **Quotas (Kueue cohort style).** A tenant never holds more than ``guaranteed +
   borrow_limit`` GPUs (nor more than ``max_cpus`` / ``max_memory_mb`` / ``max_jobs``).
   Anything above the guaranteed share is *borrowed*. Jobs are only ever placed on free
   resources, so borrowing only uses capacity that is idle at that moment.
3. **Gangs.** All workers of a job are placed at once or none; a worker never spans nodes.
4. **Placement.** Best fit: each worker goes to the node with the fewest free GPUs that still
   fits it (then fewest free CPUs/memory by bucket order), which packs GPUs and keeps whole
   nodes free for large gangs.
5. **Backfill (EASY).** The highest-ranked job that is within its quota but does not fit
   gets a reservation: the earliest time enough resources free up (from running jobs'
   estimated ends) and a concrete set of nodes at that time. Lower-ranked jobs may start
   now only if they finish before the reserved start by their estimate, or if they fit in
   resources the reservation does not need. A job without an estimate counts as never
   finishing: it is never backfilled past the reservation by the "finishes before" rule
   (it may still use resources the reservation does not need, which cannot delay it).
6. **Preemption.** A job whose tenant is within its guaranteed share may reclaim capacity
   from *borrowed* jobs of other tenants; any job may preempt lower-priority jobs of its
   own tenant and lower-priority borrowed jobs of others. No job is preempted before
   ``min_runtime_before_preempt_s`` of runtime. Reclaim (same priority) is off by default
   (``reclaim_after_wait_s = inf``, Kueue's ``reclaimWithinCohort: Never``: a tenant gets
   its guarantee back as borrowed jobs end); where enabled it waits that long, never
   takes a job estimated to end within ``reclaim_min_remaining_s``, and only jobs whose lost
   work (GPUs x time run) is at most ``reclaim_work_ratio`` x the claimant's GPUs x time
   waited. Victims are taken
   lowest priority first, least work lost first, and the set is pruned to just enough.
   Whether a running job is borrowed is recomputed every pass: a tenant's running jobs
   fill its guarantee in (priority desc, start time asc) order, the rest are borrowed.
   Admissions in a decision may use resources of the jobs listed in ``preempt``: the
   executor must let those exit (SIGTERM + grace) before starting the admitted pods.
   (Live admission reclaims at once, guards off: ``scheduling/admission.py``.)
7. **Explanations.** Every job left waiting gets a code, a plain-words message, its 1-based
   position among waiting jobs and, where computable, an estimated start.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "Decision",
    "JobRequest",
    "Node",
    "PolicyConfig",
    "Quota",
    "Reservation",
    "RunningJob",
    "Snapshot",
    "WaitReason",
    "WAIT_CODES",
    "human_duration",
    "schedule",
    "schedule_fifo",
]

INF = math.inf

WAIT_CODES = (
    "quota",
    "capacity",
    "gang",
    "reserved_for_head",
    "too_large_for_cluster",
    "too_large_for_quota",
)


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpus: int
    cpus: float
    memory_mb: int
    gpu_model: str = ""


@dataclass(frozen=True, slots=True)
class Quota:
    tenant: str
    guaranteed_gpus: int
    borrow_limit_gpus: int = 0
    max_cpus: float | None = None
    max_memory_mb: int | None = None
    max_jobs: int | None = None
    weight: float = 1.0

    @property
    def max_gpus(self) -> int:
        return self.guaranteed_gpus + self.borrow_limit_gpus


@dataclass(frozen=True, slots=True)
class JobRequest:
    id: str
    tenant: str
    priority: int
    submit_time: float
    workers: int
    gpus_per_worker: int
    cpus_per_worker: float = 0.0
    memory_mb_per_worker: int = 0
    estimated_duration: float | None = None
    gpu_model: str = ""

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def total_cpus(self) -> float:
        return self.workers * self.cpus_per_worker

    @property
    def total_memory_mb(self) -> int:
        return self.workers * self.memory_mb_per_worker


@dataclass(frozen=True, slots=True)
class RunningJob:
    request: JobRequest
    placement: Mapping[str, int]  # node name -> number of workers on it
    start_time: float
    borrowed: bool = False  # label at admission time; the policy recomputes it every pass

    @property
    def estimated_end(self) -> float | None:
        est = self.request.estimated_duration
        return None if est is None else self.start_time + est


@dataclass(slots=True)
class Snapshot:
    nodes: Sequence[Node]
    quotas: Mapping[str, Quota]
    running: Sequence[RunningJob] = ()
    pending: Sequence[JobRequest] = ()
    usage_history: Mapping[str, float] = field(default_factory=dict)  # decayed GPU-seconds


class WaitReason(NamedTuple):
    """Why a job is still pending: code, plain-words message, 1-based position, ETA."""

    code: str
    message: str
    position: int
    estimated_start: float | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: str
    start: float | None  # None: depends on jobs without an estimate
    placement: Mapping[str, int]


@dataclass(slots=True)
class Decision:
    admit: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    preempt: list[tuple[str, str]] = field(default_factory=list)
    waiting: dict[str, WaitReason] = field(default_factory=dict)
    reservation: Reservation | None = None


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    fair_share: bool = True
    backfill: bool = True
    preemption: bool = True
    # usage_history (GPU-seconds) / usage_window_s = average GPUs over the decay window.
    usage_window_s: float = 86_400.0
    # Ranking (see _Ranker): seconds of queue position one second of estimated runtime
    # costs, up to the cap (a job without an estimate: the queue's median estimate) ...
    runtime_weight: float = 1.0
    runtime_cap_s: float = 3600.0
    # The runtime term fades linearly with the job's age and is gone at this age, so a long
    # job that has waited this long is ranked by submit time (and fair share) alone.
    runtime_age_s: float = 2 * 3600.0
    # ... and seconds of queue position per doubling of a tenant's service over its share.
    fair_share_s: float = 60.0
    # A job that fits in its tenant's guarantee (GPUs running now) moves this far ahead: idle
    # guaranteed capacity goes to its owner before anyone borrows, so reclaim is rarely needed.
    guarantee_boost_s: float = 0.0
    # Highest-response-ratio-next ranking (replaces the additive runtime term when > 0): a
    # job's virtual submit time is now - response_ratio_s x (waited + e) / e, where e is its
    # estimate (at least min_estimate_s) x GPUs ** gpu_exponent; the tenant terms above add.
    response_ratio_s: float = 3600.0
    min_estimate_s: float = 900.0
    gpu_exponent: float = 0.0
    # Jobs that have waited fifo_age_s go first, in submit order (the tail guard); with
    # fifo_head, so do all jobs until the first that cannot start (the EASY head). The rest
    # go by rank.
    fifo_head: bool = False
    fifo_age_s: float = INF
    # Relative tail guard: the oldest fifo_tail_fraction of the queue (by submit time) goes
    # first in submit order, whatever its age (0: off). An absolute age (2 h before) turned
    # the policy into FIFO + EASY on a busy cluster, where nearly every job waits that long;
    # on the Philly windows 0.2 met both goals in most windows (0.05, 0.1 and 0.3 fewer).
    fifo_tail_fraction: float = 0.2
    # A running job younger than this is not preempted (limits thrashing).
    min_runtime_before_preempt_s: float = 600.0
    # A job within its tenant's guarantee reclaims borrowed GPUs only after waiting this long
    # (inf: never, Kueue's reclaimWithinCohort: Never; the guarantee boost gives it the GPUs
    # that free up first instead). Live admission sets 0.
    reclaim_after_wait_s: float = INF
    # Reclaim preempts a borrowed job only if the work it loses (GPU-seconds run) is at most
    # this times the claimant's GPUs x time waited (inf: any borrowed job).
    reclaim_work_ratio: float = 0.25
    # ... and never one whose estimated end is nearer than this: it frees its GPUs soon anyway.
    reclaim_min_remaining_s: float = 3600.0
    # Bound on the work spent on preemption searches in one pass.
    max_preemption_attempts: int = 16


# --------------------------------------------------------------------------- helpers


def human_duration(seconds: float) -> str:
    """'~45 min', '~2 h', '~3 d' style rounding for messages."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"{int(round(s))} s"
    if s < 90 * 60:
        return f"{int(round(s / 60))} min"
    if s < 36 * 3600:
        return f"{int(round(s / 3600))} h"
    return f"{int(round(s / 86400))} d"


def _plural(n: float, word: str) -> str:
    n = int(n) if float(n).is_integer() else n
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _share(q: Quota | None) -> float:
    if q is None:
        return 1e-9
    return max(q.weight, 1e-9) * max(float(q.guaranteed_gpus), 0.5)


class _Cluster:
    """Free capacity per node with best-fit buckets keyed by free GPUs (per GPU model).

    ``eg/ec/em`` ("extra") exist while a reservation is active: what each node can still
    give to a job that runs past the reserved start without breaking the reservation.
    """

    __slots__ = (
        "names",
        "index",
        "model",
        "cap_g",
        "cap_c",
        "cap_m",
        "fg",
        "fc",
        "fm",
        "free_g",
        "maxg",
        "buckets",
        "models",
        "eg",
        "ec",
        "em",
        "extra_g",
    )

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.names = [n.name for n in nodes]
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.model = [n.gpu_model for n in nodes]
        self.cap_g = [n.gpus for n in nodes]
        self.cap_c = [float(n.cpus) for n in nodes]
        self.cap_m = [n.memory_mb for n in nodes]
        self.fg = list(self.cap_g)
        self.fc = list(self.cap_c)
        self.fm = list(self.cap_m)
        self.maxg = max(self.cap_g, default=0)
        self.models = sorted(set(self.model))
        self.buckets: dict[str, list[dict[int, None]]] = {}
        self.eg: list[int] | None = None
        self.ec: list[float] | None = None
        self.em: list[int] | None = None
        self.extra_g = 0
        self.free_g = 0

    def build(self) -> None:
        self.buckets = {m: [{} for _ in range(self.maxg + 1)] for m in self.models}
        for i, f in enumerate(self.fg):
            self.buckets[self.model[i]][min(max(f, 0), self.maxg)][i] = None
        self.free_g = sum(f for f in self.fg if f > 0)

    def _move(self, i: int, old: int, new: int) -> None:
        ob = min(max(old, 0), self.maxg)
        nb = min(max(new, 0), self.maxg)
        if ob != nb:
            b = self.buckets[self.model[i]]
            del b[ob][i]
            b[nb][i] = None
        self.free_g += max(new, 0) - max(old, 0)

    def take(self, i: int, g: int, c: float, m: int, extra: bool = False) -> None:
        old = self.fg[i]
        self.fg[i] = old - g
        self.fc[i] -= c
        self.fm[i] -= m
        if self.buckets:
            self._move(i, old, old - g)
        if extra and self.eg is not None:
            self.eg[i] -= g
            self.ec[i] -= c
            self.em[i] -= m
            self.extra_g -= g

    def give(self, i: int, g: int, c: float, m: int, extra: bool = False) -> None:
        self.take(i, -g, -c, -m, extra)

    def find(self, g: int, c: float, m: int, model: str, constrained: bool) -> int:
        models = (model,) if model else self.models
        fc, fm = self.fc, self.fm
        eg, ec, em = self.eg, self.ec, self.em
        for level in range(max(g, 0), self.maxg + 1):
            for mdl in models:
                blist = self.buckets.get(mdl)
                if blist is None:
                    continue
                for i in blist[level]:
                    if (
                        fc[i] >= c
                        and fm[i] >= m
                        and (not constrained or (eg[i] >= g and ec[i] >= c and em[i] >= m))
                    ):
                        return i
        return -1

    def place(self, job: JobRequest, constrained: bool) -> dict[str, int] | None:
        g, c, m = job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker
        taken: list[int] = []
        for _ in range(job.workers):
            i = self.find(g, c, m, job.gpu_model, constrained)
            if i < 0:
                for k in taken:
                    self.give(k, g, c, m, constrained)
                return None
            self.take(i, g, c, m, constrained)
            taken.append(i)
        placement: dict[str, int] = {}
        for k in taken:
            name = self.names[k]
            placement[name] = placement.get(name, 0) + 1
        return placement

    def unplace(self, job: JobRequest, placement: Mapping[str, int], constrained: bool) -> None:
        g, c, m = job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker
        for name, w in placement.items():
            self.give(self.index[name], w * g, w * c, w * m, constrained)


def _fits_count(fg: int, fc: float, fm: int, g: int, c: float, m: int) -> int:
    """How many identical workers fit in the given free amounts."""
    k = INF
    if g > 0:
        k = fg // g
    if c > 0:
        k = min(k, math.floor(fc / c + 1e-9))
    if m > 0:
        k = min(k, fm // m)
    if k == INF:
        return 1 << 30
    return max(int(k), 0)


class _ShapeInfo:
    """Per worker shape: what the empty cluster can hold (cached across a pass)."""

    __slots__ = ("max_workers", "max_gpus")

    def __init__(self, max_workers: int, max_gpus: int) -> None:
        self.max_workers = max_workers
        self.max_gpus = max_gpus


class _Common:
    """State shared by the Gantry policy and the FIFO baseline during one pass."""

    def __init__(self, snapshot: Snapshot) -> None:
        nodes = snapshot.nodes
        self.cl = _Cluster(nodes)
        self.quotas = snapshot.quotas
        types: dict[tuple, int] = {}
        for n in nodes:
            key = (n.gpus, float(n.cpus), n.memory_mb, n.gpu_model)
            types[key] = types.get(key, 0) + 1
        self.node_types = types
        self.largest = (
            max((n.gpus for n in nodes), default=0),
            max((n.cpus for n in nodes), default=0),
            max((n.memory_mb for n in nodes), default=0),
        )
        self.shapes: dict[tuple, _ShapeInfo] = {}
        self.used_g: dict[str, int] = {}
        self.used_c: dict[str, float] = {}
        self.used_m: dict[str, int] = {}
        self.used_j: dict[str, int] = {}
        self.running: list[RunningJob] = list(snapshot.running)
        cl = self.cl
        used_g, used_c, used_m, used_j = self.used_g, self.used_c, self.used_m, self.used_j
        for rj in self.running:
            r = rj.request
            t = r.tenant
            g, c, m, n = r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker, r.workers
            used_g[t] = used_g.get(t, 0) + n * g
            used_c[t] = used_c.get(t, 0.0) + n * c
            used_m[t] = used_m.get(t, 0) + n * m
            used_j[t] = used_j.get(t, 0) + 1
            for name, w in rj.placement.items():
                i = cl.index.get(name)
                if i is not None:
                    cl.fg[i] -= w * g
                    cl.fc[i] -= w * c
                    cl.fm[i] -= w * m
        cl.build()

    # -- usage bookkeeping
    def charge(self, r: JobRequest, sign: int = 1) -> None:
        t = r.tenant
        self.used_g[t] = self.used_g.get(t, 0) + sign * r.total_gpus
        self.used_c[t] = self.used_c.get(t, 0.0) + sign * r.total_cpus
        self.used_m[t] = self.used_m.get(t, 0) + sign * r.total_memory_mb
        self.used_j[t] = self.used_j.get(t, 0) + sign

    def shape(self, r: JobRequest) -> _ShapeInfo:
        key = (r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker, r.gpu_model)
        info = self.shapes.get(key)
        if info is None:
            g, c, m, model = key
            mw = 0
            mg = 0
            for (ng, nc, nm, nmodel), count in self.node_types.items():
                if model and nmodel != model:
                    continue
                mw += count * min(_fits_count(ng, nc, nm, g, c, m), 1 << 30)
                mg += count * ng
            info = _ShapeInfo(mw, mg)
            self.shapes[key] = info
        return info

    def too_large(self, r: JobRequest) -> tuple[str, str] | None:
        q = self.quotas.get(r.tenant)
        total_g = r.total_gpus
        if q is None:
            return (
                "too_large_for_quota",
                f"tenant {r.tenant} has no quota on this cluster, so this job cannot run; "
                "ask an administrator for a quota",
            )
        if total_g > q.max_gpus:
            return (
                "too_large_for_quota",
                f"needs {_plural(total_g, 'GPU')} but tenant {r.tenant} may use at most "
                f"{q.max_gpus} ({q.guaranteed_gpus} guaranteed + {q.borrow_limit_gpus} "
                "borrowable); reduce the job or ask for a larger quota",
            )
        if q.max_cpus is not None and r.total_cpus > q.max_cpus + 1e-9:
            return (
                "too_large_for_quota",
                f"needs {r.total_cpus:g} CPUs but tenant {r.tenant} may use at most "
                f"{q.max_cpus:g}; reduce the job or ask for a larger quota",
            )
        if q.max_memory_mb is not None and r.total_memory_mb > q.max_memory_mb:
            return (
                "too_large_for_quota",
                f"needs {r.total_memory_mb} MB of memory but tenant {r.tenant} may use at "
                f"most {q.max_memory_mb} MB; reduce the job or ask for a larger quota",
            )
        if q.max_jobs is not None and q.max_jobs < 1:
            return ("too_large_for_quota", f"tenant {r.tenant} may not run any jobs")
        info = self.shape(r)
        if info.max_workers >= r.workers:
            return None
        model = f" {r.gpu_model}" if r.gpu_model else ""
        if info.max_workers == 0:
            lg, lc, lm = self.largest
            return (
                "too_large_for_cluster",
                f"one worker needs {_plural(r.gpus_per_worker, model.strip() + ' GPU' if model else 'GPU')}, "
                f"{r.cpus_per_worker:g} CPUs and {r.memory_mb_per_worker} MB but no node is that "
                f"big (largest: {lg} GPUs, {lc:g} CPUs, {lm} MB); split it into more workers",
            )
        if total_g > info.max_gpus:
            return (
                "too_large_for_cluster",
                f"needs {total_g}{model} GPUs but the whole cluster has {info.max_gpus}",
            )
        return (
            "too_large_for_cluster",
            f"needs {r.workers} workers but at most {info.max_workers} workers of this size "
            "fit on the whole cluster even when it is empty",
        )

    def quota_block(self, r: JobRequest) -> str | None:
        q = self.quotas[r.tenant]
        t = r.tenant
        ug = self.used_g.get(t, 0)
        if ug + r.total_gpus > q.max_gpus:
            if q.borrow_limit_gpus:
                tail = f"and may borrow at most {q.borrow_limit_gpus} more"
            else:
                tail = "and nothing can be borrowed"
            return (
                f"waiting for {_plural(r.total_gpus, 'GPU')}; tenant {t} uses {ug} of its "
                f"{q.guaranteed_gpus} guaranteed GPUs {tail}; it starts when the tenant's "
                "own jobs finish"
            )
        if q.max_cpus is not None and self.used_c.get(t, 0.0) + r.total_cpus > q.max_cpus + 1e-9:
            return (
                f"waiting for {r.total_cpus:g} CPUs; tenant {t} uses "
                f"{self.used_c.get(t, 0.0):g} of its {q.max_cpus:g} CPU limit"
            )
        if q.max_memory_mb is not None and (
            self.used_m.get(t, 0) + r.total_memory_mb > q.max_memory_mb
        ):
            return (
                f"waiting for {r.total_memory_mb} MB of memory; tenant {t} uses "
                f"{self.used_m.get(t, 0)} MB of its {q.max_memory_mb} MB limit"
            )
        if q.max_jobs is not None and self.used_j.get(t, 0) + 1 > q.max_jobs:
            return f"tenant {t} already runs {self.used_j.get(t, 0)} of its {q.max_jobs} jobs"
        return None

    def capacity_message(self, r: JobRequest) -> tuple[str, str]:
        """Why a quota-admissible job does not fit right now: 'capacity' or 'gang'."""
        q = self.quotas[r.tenant]
        t = r.tenant
        need = r.total_gpus
        free = self.cl.free_g
        ug = self.used_g.get(t, 0)
        if need <= free and r.workers > 1:
            return (
                "gang",
                f"waiting for {r.workers} workers x {r.gpus_per_worker} GPUs placed together; "
                f"{free} GPUs are free but too scattered across nodes for the whole gang",
            )
        if need <= free:
            return (
                "capacity",
                f"waiting for {_plural(need, 'GPU')} on one node; {free} GPUs are free but no "
                "single node has room for it",
            )
        if ug + need <= q.guaranteed_gpus:
            tail = (
                f"tenant {t} uses {ug} of its {q.guaranteed_gpus} guaranteed GPUs; the rest is "
                "held by jobs that cannot be preempted"
            )
        else:
            tail = (
                f"tenant {t} uses {ug} of its {q.guaranteed_gpus} guaranteed GPUs and no idle "
                "capacity is left to borrow"
            )
        return "capacity", f"waiting for {_plural(need, 'GPU')}; {free} free in the cluster; {tail}"


def _finish_decision(
    order: Sequence[JobRequest],
    admitted: set[str],
    pre: Mapping[str, tuple[str, str, float | None]],
    decision: Decision,
) -> Decision:
    pos = 0
    waiting = decision.waiting
    make = WaitReason._make
    for r in order:
        rid = r.id
        if rid in admitted:
            continue
        pos += 1
        code, msg, est = pre[rid]
        waiting[rid] = make((code, msg, pos, est))
    return decision


# --------------------------------------------------------------------------- Gantry policy


class _Victim:
    __slots__ = ("rj", "end", "g")

    def __init__(self, rj: RunningJob, end: float) -> None:
        self.rj = rj
        self.end = end
        self.g = rj.request.total_gpus


class _Ranker:
    """The pass order, produced lazily because it depends on this pass's admissions.

    Within a tenant, jobs are ordered by (priority desc, *virtual submit time* =
    submit time + ``runtime_weight`` x min(estimate, ``runtime_cap_s``) x (1 - age /
    ``runtime_age_s``), id): a short job is preferred over a long one submitted a little
    earlier, but never by more than the cap, and the term fades as a job waits, so long jobs
    age to the front. A job without an estimate counts as the median estimate of the queued
    jobs that have one (and it is never backfilled past a reservation). Across tenants the heads of the tenants' queues are
    merged by (priority desc, virtual submit time + ``fair_share_s`` x log2(service)), where
    a tenant's *service* is its attained GPU service (decayed usage over the window + GPUs
    running now, including jobs admitted earlier in this pass) relative to its share
    (weight x guaranteed GPUs): a tenant at twice its share is pushed back by
    ``fair_share_s``, one at half its share is brought forward by it. The number or length
    of a tenant's *pending* jobs does not count against it. A preempted job is requeued with
    its original submit time, so it keeps its place.
    """

    __slots__ = ("heap", "queues", "pos", "service", "share", "cfg", "ver", "plain", "used",
                 "guar", "head_found", "now", "bonus")

    def __init__(
        self, snapshot: Snapshot, common: _Common, cfg: PolicyConfig, now: float
    ) -> None:
        self.cfg = cfg
        self.head_found = lambda: False
        self.now = now
        pend = list(snapshot.pending)
        self.plain = not cfg.fair_share
        if self.plain:
            pend.sort(key=lambda r: (-r.priority, r.submit_time, r.id))
            self.queues = {"": pend}
            self.pos = {"": 0}
            self.heap = []
            return
        w = cfg.runtime_weight
        cap = cfg.runtime_cap_s
        age_limit = cfg.runtime_age_s
        # A job without an estimate counts as the median estimate of those that have one:
        # neither ahead of nor behind a typical job for leaving its timeout unset.
        known = sorted(r.estimated_duration for r in pend if r.estimated_duration is not None)
        typical = known[(len(known) - 1) // 2] if known else 0.0
        queues: dict[str, list] = {}
        rr, min_e, gexp = cfg.response_ratio_s, cfg.min_estimate_s, cfg.gpu_exponent
        for r in pend:
            est = r.estimated_duration
            if est is None:
                est = typical
            v = r.submit_time
            age = now - v
            if rr > 0:
                # Highest response ratio next: (waited + expected runtime) / expected runtime.
                e = est if est > min_e else min_e
                if gexp:
                    e *= (r.workers * r.gpus_per_worker or 1) ** gexp
                v = now - rr * ((age if age > 0.0 else 0.0) + e) / e
            elif age < age_limit:
                v += w * min(est, cap) * (1.0 - age / age_limit)
            queues.setdefault(r.tenant, []).append((-r.priority, v, r.submit_time, r.id, r))
        for q in queues.values():
            q.sort()  # ids are unique, so the comparison never reaches the request
        hist = snapshot.usage_history
        window = max(cfg.usage_window_s, 1e-9)
        self.service: dict[str, float] = {}
        self.share: dict[str, float] = {}
        for t in queues:
            self.share[t] = _share(common.quotas.get(t))
            self.service[t] = hist.get(t, 0.0) / window + common.used_g.get(t, 0)
        self.used = {t: common.used_g.get(t, 0) for t in queues}
        self.guar = {t: (q.guaranteed_gpus if (q := common.quotas.get(t)) else 0) for t in queues}
        self.queues = queues
        self.pos = dict.fromkeys(queues, 0)
        self.ver = dict.fromkeys(queues, 0)
        self.bonus = {t: self._bonus(t) for t in queues}
        self.heap: list = []
        for t in queues:
            self._push(t)

    def _bonus(self, t: str) -> float:
        """The tenant's fair-share term (cached in ``self.bonus``; it changes on admission)."""
        s = self.service[t] / self.share[t]
        return self.cfg.fair_share_s * math.log2(max(s, 1.0 / 64))

    def _push(self, t: str) -> None:
        q = self.queues[t]
        i = self.pos[t]
        if i < len(q):
            negp, v, sub, rid, r = q[i]
            v += self.bonus[t]
            if self.used[t] + r.total_gpus <= self.guar[t]:
                v -= self.cfg.guarantee_boost_s
            heapq.heappush(self.heap, (negp, v, sub, rid, t, self.ver[t]))

    def __iter__(self):
        if self.plain:
            yield from self.queues[""]
            return
        done: set[str] = set()
        tail = self.cfg.fifo_tail_fraction
        if not self.cfg.fifo_head and self.cfg.fifo_age_s == INF and tail > 0:
            yield from self._tail(done, tail)
        elif self.cfg.fifo_head or self.cfg.fifo_age_s < INF or tail > 0:
            # Submit order until the first job that neither starts nor is held by its own
            # quota: that one gets the reservation (EASY), the rest are ranked below.
            fifo = sorted((x[4] for q in self.queues.values() for x in q),
                          key=lambda r: (-r.priority, r.submit_time, r.id))
            guard_age = self.cfg.fifo_age_s
            if tail > 0 and fifo:
                k = int(len(fifo) * tail)
                oldest = sorted(r.submit_time for r in fifo)
                guard_age = min(guard_age, self.now - oldest[k] if k < len(oldest) else -INF)
            for r in fifo:
                if (not self.cfg.fifo_head or self.head_found()) and (
                    self.now - r.submit_time < guard_age
                ):
                    break
                done.add(r.id)
                yield r
        heap = self.heap
        while heap:
            _, _, _, _, t, ver = heapq.heappop(heap)
            if ver != self.ver[t]:
                continue
            i = self.pos[t]
            self.pos[t] = i + 1
            self.ver[t] += 1
            r = self.queues[t][i][4]
            if r.id not in done:
                yield r
            self._push(t)

    def _tail(self, done: set[str], tail: float):
        """The relative tail guard alone: the oldest ``tail`` of the queue in submit order,
        up to the first younger job in that order (a younger job of higher priority comes
        first). The same jobs in the same order as sorting the whole queue, without it."""
        jobs = [x[4] for q in self.queues.values() for x in q]
        if not jobs:
            return
        k = int(len(jobs) * tail)
        # The guard takes every job submitted by the k-th oldest submit time.
        threshold = INF if k >= len(jobs) else sorted([r.submit_time for r in jobs])[k]
        old, young_first = [], None
        for r in jobs:
            key = (-r.priority, r.submit_time, r.id)
            if r.submit_time <= threshold:
                old.append((key, r))
            elif young_first is None or key < young_first:
                young_first = key
        old.sort()
        for key, r in old:
            if young_first is not None and key > young_first:
                break
            done.add(r.id)
            yield r

    def admitted(self, r: JobRequest) -> None:
        """``r`` (already yielded) was admitted: its tenant's service grows."""
        if self.plain:
            return
        t = r.tenant
        self.service[t] += r.total_gpus
        self.bonus[t] = self._bonus(t)
        self.used[t] += r.total_gpus
        self.ver[t] += 1
        self._push(t)


def schedule(snapshot: Snapshot, now: float, config: PolicyConfig | None = None) -> Decision:
    """One scheduling pass of the Gantry policy (see the module docstring)."""
    cfg = config or PolicyConfig()
    common = _Common(snapshot)
    cl = common.cl
    quotas = common.quotas
    ranker = _Ranker(snapshot, common, cfg, now)
    order: list[JobRequest] = []
    decision = Decision()
    admitted: set[str] = set()
    pre: dict[str, tuple[str, str, float | None]] = {}

    # Running jobs this pass may still end (estimated end, clamped to now when overrunning).
    live: dict[str, _Victim] = {}
    for rj in common.running:
        est = rj.request.estimated_duration
        live[rj.request.id] = _Victim(rj, INF if est is None else max(rj.start_time + est, now))
    new_running: list[tuple[JobRequest, dict[str, int], float]] = []

    # Preemption candidates: which running jobs are borrowed right now.
    borrowed_ids: set[str] = set()
    if cfg.preemption:
        by_tenant: dict[str, list[RunningJob]] = {}
        for rj in common.running:
            by_tenant.setdefault(rj.request.tenant, []).append(rj)
        for t, jobs in by_tenant.items():
            q = quotas.get(t)
            guar = q.guaranteed_gpus if q else 0
            jobs.sort(key=lambda rj: (-rj.request.priority, rj.start_time, rj.request.id))
            acc = 0
            for rj in jobs:
                acc += rj.request.total_gpus
                if acc > guar:
                    borrowed_ids.add(rj.request.id)
    min_prio = min((rj.request.priority for rj in common.running), default=None)
    own_min_prio: dict[str, int] = {}
    for rj in common.running:
        t, p = rj.request.tenant, rj.request.priority
        if p < own_min_prio.get(t, p + 1):
            own_min_prio[t] = p
    # Victims: lowest priority first, then least work lost (GPUs x time run), so the jobs
    # that have run longest are the last to lose their progress.
    # Sorted on the first preemption search only: most passes never search.
    victims_sorted: list[_Victim] = []
    preempted: set[str] = set()
    attempts = 0

    # Reservation state.
    res_job: JobRequest | None = None
    res_T: float | None = None  # None with a reservation = unknown (depends on unestimated jobs)
    res_msg = ""
    fail_cache: dict[tuple, int] = {}
    epoch = 0  # bumped whenever capacity is released (preemption), invalidating fail_cache

    def release(v: _Victim, sign: int) -> None:
        r = v.rj.request
        g, c, m = r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker
        extra = res_job is not None and (res_T is None or v.end > res_T)
        for name, w in v.rj.placement.items():
            i = cl.index.get(name)
            if i is not None:
                if sign > 0:
                    cl.give(i, w * g, w * c, w * m, extra)
                else:
                    cl.take(i, w * g, w * c, w * m, extra)
        common.charge(r, -sign)

    def try_preempt(r: JobRequest, constrained: bool) -> tuple[dict[str, int], list] | None:
        t = r.tenant
        q = quotas[t]
        within = common.used_g.get(t, 0) + r.total_gpus <= q.guaranteed_gpus
        # Reclaiming borrowed capacity waits until the claimant has queued a while: most
        # borrowed jobs end by themselves in that time, and ending them early wastes work.
        waited = now - r.submit_time
        within = within and waited >= cfg.reclaim_after_wait_s
        # ... and only victims whose lost work (GPU-seconds run) is at most what the claimant
        # has lost by waiting (times reclaim_work_ratio): the longer it waits, the more it may
        # take back, but it never throws away more than it gains.
        ratio = cfg.reclaim_work_ratio
        max_loss = INF if ratio == INF else ratio * r.total_gpus * max(waited, 0.0)
        cands = []
        avail = cl.free_g
        if not victims_sorted and live:
            victims_sorted.extend(sorted(
                live.values(),
                key=lambda v: (v.rj.request.priority, v.g * (now - v.rj.start_time),
                               v.rj.request.id),
            ))
        for v in victims_sorted:
            rid = v.rj.request.id
            if rid in preempted:
                continue
            vr = v.rj.request
            if now - v.rj.start_time < cfg.min_runtime_before_preempt_s:
                continue
            if vr.tenant == t:
                ok = vr.priority < r.priority
            elif rid in borrowed_ids:
                ok = vr.priority < r.priority or (
                    within
                    and v.g * (now - v.rj.start_time) <= max_loss
                    and v.end - now >= cfg.reclaim_min_remaining_s
                )
            else:
                ok = False
            if ok:
                cands.append(v)
                avail += v.g
        if avail < r.total_gpus or not cands:
            return None

        def attempt() -> dict[str, int] | None:
            if cl.free_g < r.total_gpus or common.quota_block(r) is not None:
                return None
            return cl.place(r, constrained)

        chosen: list[_Victim] = []
        placement = None
        for v in cands:
            chosen.append(v)
            release(v, +1)
            placement = attempt()
            if placement is not None:
                break
        if placement is None:
            for v in chosen:
                release(v, -1)
            return None
        # Prune victims that turn out not to be needed (keep the last one).
        for v in list(reversed(chosen[:-1])):
            cl.unplace(r, placement, constrained)
            release(v, -1)
            p2 = attempt()
            if p2 is not None:
                placement = p2
                chosen.remove(v)
            else:
                release(v, +1)
                placement = attempt()
                assert placement is not None
        return placement, chosen

    def make_reservation(r: JobRequest) -> None:
        nonlocal res_job, res_T, res_msg
        g, c, m = r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker
        n = len(cl.fg)
        fg, fc, fm = list(cl.fg), list(cl.fc), list(cl.fm)
        ok_model = [not r.gpu_model or cl.model[i] == r.gpu_model for i in range(n)]
        caps = [_fits_count(fg[i], fc[i], fm[i], g, c, m) if ok_model[i] else 0 for i in range(n)]
        total = sum(caps)
        T: float | None = now
        if total < r.workers:
            ends = [
                (v.end, v.rj.request, v.rj.placement) for k, v in live.items() if k not in preempted
            ]
            ends.extend((e, jr, p) for jr, p, e in new_running)
            ends.sort(key=lambda x: (x[0], x[1].id))
            T = None
            for e, jr, p in ends:
                jg, jc, jm = jr.gpus_per_worker, jr.cpus_per_worker, jr.memory_mb_per_worker
                for name, w in p.items():
                    i = cl.index.get(name)
                    if i is None:
                        continue
                    fg[i] += w * jg
                    fc[i] += w * jc
                    fm[i] += w * jm
                    if ok_model[i]:
                        k = _fits_count(fg[i], fc[i], fm[i], g, c, m)
                        total += k - caps[i]
                        caps[i] = k
                if total >= r.workers:
                    T = None if e == INF else e
                    break
            else:
                return  # cannot fit even when everything ends (nodes missing): no reservation
        # Reserved placement at T: best fit on the future free state.
        cand = sorted((i for i in range(n) if caps[i] > 0), key=lambda i: (fg[i], fc[i], i))
        left = r.workers
        placement: dict[str, int] = {}
        for i in cand:
            k = min(caps[i], left)
            placement[cl.names[i]] = k
            fg[i] -= k * g
            fc[i] -= k * c
            fm[i] -= k * m
            left -= k
            if left == 0:
                break
        cl.eg, cl.ec, cl.em = fg, fc, fm
        cl.extra_g = sum(x for x in fg if x > 0)
        res_job, res_T = r, T
        decision.reservation = Reservation(r.id, T, placement)
        when = (
            f"reserved start in ~{human_duration(T - now)}"
            if T is not None
            else ("start depends on jobs without a runtime estimate")
        )
        res_msg = f"held for the {r.total_gpus}-GPU job ahead of it ({when})"

    # Memos: too_large per (tenant, shape) is fixed for the pass; quota / capacity answers
    # per (tenant, shape, constrained) stay valid while `version` (bumped on every admission,
    # preemption or new reservation) is unchanged, since they then depend on nothing else.
    static_memo: dict[tuple, tuple[str, str] | None] = {}
    state_memo: dict[tuple, tuple[int, tuple[str, str, float | None]]] = {}
    preempt_failed: dict[tuple, tuple[int, int]] = {}
    version = 0
    ranker.head_found = lambda: res_job is not None
    for r in ranker:
        order.append(r)
        rid = r.id
        shape_key = (r.tenant, r.workers, r.gpus_per_worker, r.cpus_per_worker,
                     r.memory_mb_per_worker, r.gpu_model)
        if shape_key in static_memo:
            tl = static_memo[shape_key]
        else:
            tl = static_memo[shape_key] = common.too_large(r)
        if tl is not None:
            pre[rid] = (tl[0], tl[1], None)
            continue
        est = r.estimated_duration
        constrained = False
        if res_job is not None:
            constrained = not (est is not None and res_T is not None and now + est <= res_T)
        mkey = (shape_key, constrained, r.priority)
        memo = state_memo.get(mkey)
        if memo is not None and memo[0] == version:
            pre[rid] = memo[1]
            continue
        qb = common.quota_block(r)
        need = r.total_gpus
        key = (r.workers, r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker,
               r.gpu_model, constrained)
        placement = None
        if (qb is None and need <= cl.free_g and (not constrained or need <= cl.extra_g)
                and fail_cache.get(key) != epoch):
            placement = cl.place(r, constrained)
            if placement is None:
                fail_cache[key] = epoch
        victims: list[_Victim] = []
        if placement is None and cfg.preemption and attempts < cfg.max_preemption_attempts and (
            # Borrowed jobs of others are fair game at equal priority only once the job has
            # waited reclaim_after_wait_s (try_preempt's rule): before that (or with reclaim
            # off) the search cannot succeed, and it costs a walk over every running job.
            (qb is None and (
                (borrowed_ids and now - r.submit_time >= cfg.reclaim_after_wait_s)
                or (min_prio is not None and r.priority > min_prio)
            ))
            or (qb is not None and r.priority > own_min_prio.get(r.tenant, r.priority))
        ):
            pf_key = (r.tenant, r.priority, constrained)
            pf = preempt_failed.get(pf_key)
            if pf is None or pf[0] != version or need < pf[1]:
                attempts += 1
                got = try_preempt(r, constrained)
                if got is not None:
                    placement, victims = got
                    epoch += 1
                else:
                    preempt_failed[pf_key] = (version, need)
        if placement is None and qb is not None:
            pre[rid] = ("quota", qb, None)
            state_memo[mkey] = (version, pre[rid])
            continue
        if placement is not None:
            within = common.used_g.get(r.tenant, 0) + need <= quotas[r.tenant].guaranteed_gpus
            for v in victims:
                vid = v.rj.request.id
                preempted.add(vid)
                if v.rj.request.tenant == r.tenant:
                    why = f"preempted by higher-priority job {rid} of the same tenant"
                elif vid in borrowed_ids and within:
                    why = (f"preempted: it ran on capacity borrowed from tenant {r.tenant}, "
                           f"which reclaimed it for job {rid}")
                else:
                    why = f"preempted by higher-priority job {rid}"
                decision.preempt.append((vid, why))
            common.charge(r, +1)
            ranker.admitted(r)
            version += 1
            admitted.add(rid)
            decision.admit.append((rid, placement))
            new_running.append((r, placement, INF if est is None else now + est))
            continue
        # Not startable now.
        if res_job is None:
            if cfg.backfill:
                make_reservation(r)
            code, msg = common.capacity_message(r)
            estart = res_T if res_job is r else None
            if res_job is r and res_T is not None:
                msg += f"; next in line, reserved start in ~{human_duration(res_T - now)}"
            elif res_job is r:
                msg += "; next in line once jobs without a runtime estimate finish"
            pre[rid] = (code, msg, estart)
            if not cfg.backfill:
                res_job = r  # plain priority queue without backfill: everything else waits
                res_msg = f"behind job {rid}, which must start first (backfill is disabled)"
                n = len(cl.fg)
                cl.eg, cl.ec, cl.em = [0] * n, [0.0] * n, [0] * n
                cl.extra_g = 0
                res_T = None
            version += 1
            continue
        # A reservation exists: would the job fit if it ignored it?
        if constrained and need <= cl.free_g and cl.find(
            r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker, r.gpu_model, False
        ) >= 0:
            why = ("it has no runtime estimate" if est is None
                   else f"its estimated {human_duration(est)} would run past that start")
            pre[rid] = ("reserved_for_head", f"{res_msg}; {why}", None)
        else:
            code, msg = common.capacity_message(r)
            pre[rid] = (code, msg, None)
            state_memo[mkey] = (version, pre[rid])
    return _finish_decision(order, admitted, pre, decision)


# --------------------------------------------------------------------------- FIFO baseline


def schedule_fifo(snapshot: Snapshot, now: float, config: PolicyConfig | None = None) -> Decision:
    """Strict first-come-first-served baseline: no backfill, no preemption, no fair share.

    Jobs start in submit order; the first job that does not fit blocks everything behind it.
    The same hard quota caps are enforced (a job held only by its own tenant's cap does not
    block other tenants, as with one FIFO queue per tenant in a shared cohort); jobs that can
    never run are skipped with a too_large_* reason instead of blocking the queue forever.
    """
    del config
    common = _Common(snapshot)
    cl = common.cl
    order = sorted(snapshot.pending, key=lambda r: (r.submit_time, r.id))
    decision = Decision()
    admitted: set[str] = set()
    pre: dict[str, tuple[str, str, float | None]] = {}
    head: JobRequest | None = None
    for r in order:
        tl = common.too_large(r)
        if tl is not None:
            pre[r.id] = (tl[0], tl[1], None)
            continue
        qb = common.quota_block(r)
        if qb is not None:
            pre[r.id] = ("quota", qb, None)
            continue
        if head is not None:
            pre[r.id] = (
                "capacity",
                f"behind job {head.id} ({head.total_gpus} GPUs), which must start first "
                "(first come, first served)",
                None,
            )
            continue
        placement = cl.place(r, False) if r.total_gpus <= cl.free_g else None
        if placement is None:
            head = r
            code, msg = common.capacity_message(r)
            pre[r.id] = (code, msg, None)
            continue
        common.charge(r, +1)
        admitted.add(r.id)
        decision.admit.append((r.id, placement))
    return _finish_decision(order, admitted, pre, decision)
