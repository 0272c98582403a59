"""Quotas: the pass's usage bookkeeping per tenant, hard caps, and why a job cannot run."""

from __future__ import annotations

import itertools

from .data import JobRequest, RunningJob, Snapshot
from .messages import plural
from .placement import Cluster, fits_count


class _ShapeInfo:
    """Per worker shape: what the empty cluster can hold (cached across a pass)."""

    __slots__ = ("max_workers", "max_gpus")

    def __init__(self, max_workers: int, max_gpus: int) -> None:
        self.max_workers = max_workers
        self.max_gpus = max_gpus


class PassState:
    """State shared by the Gantry policy and the FIFO baseline during one pass."""

    def __init__(self, snapshot: Snapshot) -> None:
        nodes = snapshot.nodes
        self.cl = Cluster(nodes)
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
        # The GPUs each tenant is guaranteed, as the pass counts them: its quota's, or
        # rounded up to its widest job (``round_up_guarantees``).
        self.guaranteed: dict[str, int] = {t: q.guaranteed_gpus for t, q in self.quotas.items()}
        # The lowest priority each tenant runs (what preemption within a tenant looks at).
        self.lowest_priority: dict[str, int] = {}
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
        cl.build()

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
        q = self.quotas[r.tenant]
        t = r.tenant
        ug = self.used_g.get(t, 0)
        if ug + r.total_gpus > q.max_gpus:
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
