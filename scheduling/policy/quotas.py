"""Quotas: the pass's usage bookkeeping per tenant, hard caps, and why a job cannot run."""

from __future__ import annotations

import itertools
import operator

from .data import JobRequest, RunningJob, Snapshot
from .messages import plural
from .placement import Cluster, fits_count


class _ShapeInfo:
    """Per worker shape: what the empty cluster can hold (cached across a pass)."""

    __slots__ = ("max_workers", "max_gpus")

    def __init__(self, max_workers: int, max_gpus: int) -> None:
        self.max_workers = max_workers
        self.max_gpus = max_gpus


def _node_types(nodes) -> tuple[dict[tuple, int], tuple]:
    """How many nodes of each kind (GPUs, CPUs, memory, GPU model), and the largest amounts
    of any node (``PassState.node_types``, ``largest``)."""
    types: dict[tuple, int] = {}
    for n in nodes:
        key = (n.gpus, float(n.cpus), n.memory_mb, n.gpu_model)
        types[key] = types.get(key, 0) + 1
    largest = (
        max((n.gpus for n in nodes), default=0),
        max((n.cpus for n in nodes), default=0),
        max((n.memory_mb for n in nodes), default=0),
    )
    return types, largest


def changed_objects(before: list, now: list) -> tuple[list, list] | None:
    """What changed from ``before`` to ``now`` (by identity): the objects gone and the new
    ones, such that ``now`` holds those of ``before`` less the gone plus the new (as
    multisets). Where the lists are as long and differ in a few places (objects replaced
    in place) that is one walk over both (exact as multisets, an object twice included);
    else they are compared as sets, and None where an object is in either list twice
    (then the caller starts anew)."""
    if len(before) == len(now):
        at = list(itertools.compress(itertools.count(), map(operator.is_not, before, now)))
        if len(at) <= len(now) // 8:
            return [before[i] for i in at], [now[i] for i in at]
    was = dict(zip(map(id, before), before, strict=True))
    is_ = dict(zip(map(id, now), now, strict=True))
    if len(was) != len(before) or len(is_) != len(now):
        return None
    return ([was[k] for k in was.keys() - is_.keys()],
            [is_[k] for k in is_.keys() - was.keys()])


def _whole(rj: RunningJob) -> bool:
    """Are a running job's amounts whole numbers (ints, its CPUs an int or a whole float
    below 2**50)? Then adding and taking back its amounts, in any order, gives exactly the
    sums ``PassState`` adds up in running order."""
    r = rj.request
    c = r.cpus_per_worker
    return (type(r.workers) is int and type(r.gpus_per_worker) is int
            and type(r.memory_mb_per_worker) is int
            and (type(c) is int or type(c) is float and c.is_integer()) and -2**50 < c < 2**50
            and all(type(w) is int for w in rj.placement.values()))


class RunningUsage:
    """What the running jobs hold, kept from one pass to the next (``QueueCache.running``):
    per tenant the GPUs, CPUs, memory and jobs and the priorities it runs, and per node the
    free GPUs, CPUs and memory. Between two passes about 1% of the running jobs change, so
    ``update`` takes back the jobs that are gone and adds the new ones (a running job is
    unchanged while the snapshot holds the same ``RunningJob`` object) rather than adding
    up all of them again. Those are the very sums ``PassState`` adds up only while every
    amount is a whole number (``_whole``: float sums of whole numbers are exact in any
    order); while any running job's is not, or the nodes change, the pass adds them up
    anew (and ``keep`` takes its sums)."""

    __slots__ = ("nodes", "cluster", "node_types", "largest", "whole_nodes", "jobs", "inexact",
                 "sums", "used_g", "used_c", "used_m", "used_j", "priorities", "fg", "fc", "fm")

    def __init__(self) -> None:
        self.nodes: list | None = None  # the nodes of the pass before, and what they are:
        self.cluster: Cluster  # all free, to copy (``Cluster.all_free``)
        self.node_types: dict[tuple, int]
        self.largest: tuple
        self.whole_nodes = False  # every node's amounts whole numbers (as ``_whole``)
        self.jobs: list[RunningJob] | None = None  # the running jobs of the pass before
        self.inexact = 0  # running jobs whose amounts are not whole (``_whole``)
        self.sums = False  # whether the sums below are those of ``jobs``

    def update(self, nodes, running: list[RunningJob]) -> bool:
        """Bring the sums to ``running`` on ``nodes``; False where the pass must add them up
        anew (then ``keep`` them)."""
        if self.nodes is None or len(nodes) != len(self.nodes) or any(
                map(operator.is_not, nodes, self.nodes)):
            self.nodes = list(nodes)
            self.cluster = Cluster(nodes)
            self.node_types, self.largest = _node_types(nodes)
            self.whole_nodes = all(
                type(n.gpus) is int and type(n.memory_mb) is int
                and float(n.cpus).is_integer() and -2**50 < n.cpus < 2**50 for n in nodes)
            self.sums = False
        before, self.jobs = self.jobs, running
        changed = None if before is None else changed_objects(before, running)
        if changed is None:
            self.inexact = sum(1 for rj in running if not _whole(rj))
            self.sums = False
            return False
        gone, new = changed
        self.inexact += (sum(1 for rj in new if not _whole(rj))
                         - sum(1 for rj in gone if not _whole(rj)))
        if not self.sums or self.inexact or not self.whole_nodes:
            self.sums = False
            return False
        for rj in gone:
            self._add(rj, -1)
        for rj in new:
            self._add(rj, +1)
        return True

    def _add(self, rj: RunningJob, sign: int) -> None:
        r = rj.request
        t = r.tenant
        g, c, m, n = r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker, r.workers
        priorities = self.priorities.get(t)
        if priorities is None:  # the tenant's first running job
            self.used_g[t], self.used_c[t], self.used_m[t], self.used_j[t] = 0, 0.0, 0, 0
            priorities = self.priorities[t] = {}
        self.used_g[t] += sign * (n * g)
        self.used_c[t] += sign * (n * c)
        self.used_m[t] += sign * (n * m)
        self.used_j[t] += sign
        count = priorities.get(r.priority, 0) + sign
        if count:
            priorities[r.priority] = count
        else:
            del priorities[r.priority]
        if not self.used_j[t]:  # it runs nothing now: not listed, as PassState has it
            for used in (self.used_g, self.used_c, self.used_m, self.used_j, self.priorities):
                del used[t]
        index, fg, fc, fm = self.cluster.index, self.fg, self.fc, self.fm
        for name, w in rj.placement.items():
            i = index.get(name)
            if i is not None:
                fg[i] -= sign * (w * g)
                fc[i] -= sign * (w * c)
                fm[i] -= sign * (w * m)

    def keep(self, state: PassState) -> None:
        """Take the sums a pass added up anew (before it admits anything), where later
        passes may update them."""
        if self.inexact or not self.whole_nodes:
            return
        self.used_g, self.used_c = dict(state.used_g), dict(state.used_c)
        self.used_m, self.used_j = dict(state.used_m), dict(state.used_j)
        cl = state.cl
        self.fg, self.fc, self.fm = list(cl.fg), list(cl.fc), list(cl.fm)
        priorities: dict[str, dict[int, int]] = {}
        for rj in state.running:
            r = rj.request
            counts = priorities.get(r.tenant)
            if counts is None:
                counts = priorities[r.tenant] = {}
            counts[r.priority] = counts.get(r.priority, 0) + 1
        self.priorities = priorities
        self.sums = True

    def take(self, state: PassState) -> None:
        """Give ``state`` the sums (copies: the pass charges its admissions to them)."""
        state.used_g, state.used_c = dict(self.used_g), dict(self.used_c)
        state.used_m, state.used_j = dict(self.used_m), dict(self.used_j)
        state.lowest_priority = {t: min(counts) for t, counts in self.priorities.items()}
        cl = state.cl
        cl.fg, cl.fc, cl.fm = list(self.fg), list(self.fc), list(self.fm)


class PassState:
    """State shared by the Gantry policy and the FIFO baseline during one pass."""

    def __init__(self, snapshot: Snapshot, usage: RunningUsage | None = None) -> None:
        """The pass's state; ``usage``, the same object from pass to pass, keeps the running
        jobs' sums (``RunningUsage``), the same as without it."""
        nodes = snapshot.nodes
        self.running: list[RunningJob] = list(snapshot.running)
        # Sums kept from the pass before: ``usage.update`` first, for the nodes it keeps too.
        summed = usage is not None and usage.update(nodes, self.running)
        if usage is None:
            self.cl = Cluster(nodes)
            self.node_types, self.largest = _node_types(nodes)
        else:
            self.cl = usage.cluster.all_free()
            self.node_types, self.largest = usage.node_types, usage.largest
        self.quotas = snapshot.quotas
        self.shapes: dict[tuple, _ShapeInfo] = {}
        self.used_g: dict[str, int] = {}
        self.used_c: dict[str, float] = {}
        self.used_m: dict[str, int] = {}
        self.used_j: dict[str, int] = {}
        # The GPUs each tenant is guaranteed, as the pass counts them: its quota's, or
        # rounded up to its widest job (``round_up_guarantees``).
        self.guaranteed: dict[str, int] = {t: q.guaranteed_gpus for t, q in self.quotas.items()}
        # The lowest priority each tenant runs (what preemption within a tenant looks at).
        self.lowest_priority: dict[str, int] = {}
        if summed:
            usage.take(self)
        else:
            self._add_up_running()
            if usage is not None:
                usage.keep(self)
        self.cl.build()

    def _add_up_running(self) -> None:
        """What the running jobs hold: per tenant, and taken from each node's free amounts."""
        cl = self.cl
        used_g, used_c, used_m, used_j = self.used_g, self.used_c, self.used_m, self.used_j
        lowest = self.lowest_priority
        index, fg, fc, fm = cl.index, cl.fg, cl.fc, cl.fm
        for rj in self.running:
            r = rj.request
            t = r.tenant
            g, c, m, n = r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker, r.workers
            if t in used_j:
                used_g[t] += n * g
                used_c[t] += n * c
                used_m[t] += n * m
                used_j[t] += 1
                if r.priority < lowest[t]:
                    lowest[t] = r.priority
            else:  # the same sums as starting from 0 / 0.0 (types included)
                used_g[t] = 0 + n * g
                used_c[t] = 0.0 + n * c
                used_m[t] = 0 + n * m
                used_j[t] = 1
                lowest[t] = r.priority
            for name, w in rj.placement.items():
                i = index.get(name)
                if i is not None:
                    fg[i] -= w * g
                    fc[i] -= w * c
                    fm[i] -= w * m

    def round_up_guarantees(self, pending) -> None:
        """``PolicyConfig.rounded_up_slice``: each tenant with a guarantee has it rounded up
        to its widest job running or waiting now (within its quota's limit), as the sharing
        incentive's private slice is."""
        guaranteed = self.guaranteed
        widest: dict[str, int] = {}
        for r in itertools.chain(pending, (rj.request for rj in self.running)):
            g = r.workers * r.gpus_per_worker
            if g > widest.get(r.tenant, 0):
                widest[r.tenant] = g
        for t, g in widest.items():
            q = self.quotas.get(t)
            if q is not None and 0 < q.guaranteed_gpus < g:
                guaranteed[t] = min(g, q.max_gpus)

    # -- usage bookkeeping
    def charge(self, r: JobRequest, sign: int = 1) -> None:
        t, n = r.tenant, r.workers  # r.total_gpus etc., inline: once per admission
        used_g, used_c, used_m, used_j = self.used_g, self.used_c, self.used_m, self.used_j
        used_g[t] = used_g.get(t, 0) + sign * (n * r.gpus_per_worker)
        used_c[t] = used_c.get(t, 0.0) + sign * (n * r.cpus_per_worker)
        used_m[t] = used_m.get(t, 0) + sign * (n * r.memory_mb_per_worker)
        used_j[t] = used_j.get(t, 0) + sign

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
                mw += count * min(fits_count(ng, nc, nm, g, c, m), 1 << 30)
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
                f"needs {plural(total_g, 'GPU')} but tenant {r.tenant} may use at most "
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
                f"one worker needs {plural(r.gpus_per_worker, model.strip() + ' GPU' if model else 'GPU')}, "
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
        t = r.tenant
        q = self.quotas[t]
        ug = self.used_g.get(t, 0)
        # (total_gpus > max_gpus, inline: once for each job the pass works out)
        if ug + r.workers * r.gpus_per_worker > q.guaranteed_gpus + q.borrow_limit_gpus:
            if q.borrow_limit_gpus:
                tail = f"and may borrow at most {q.borrow_limit_gpus} more"
            else:
                tail = "and nothing can be borrowed"
            return (
                f"waiting for {plural(r.total_gpus, 'GPU')}; tenant {t} uses {ug} of its "
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
                f"waiting for {plural(need, 'GPU')} on one node; {free} GPUs are free but no "
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
        return "capacity", f"waiting for {plural(need, 'GPU')}; {free} free in the cluster; {tail}"
