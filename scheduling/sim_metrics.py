"""What the trace simulator measures: percentiles, Jain's index (against the weighted
max-min fair shares of ``policy.entitlement``), the independent quota / capacity check
run after every pass, and the sharing incentive (issue 40). Pure functions, no Django.

**Sharing incentive** (finish-time fairness, Themis, NSDI 2020): per tenant and window,
rho = its average JCT in the shared cluster / its average JCT alone on a private cluster of
its guaranteed GPUs, run with EASY backfill (``simulator.private_slices``). A job wider than
the slice counts as the slice rounded up to it (``slice_gpus``); a slice made of nodes of
the shared cluster's shape, the last one partial, is rounded up to whole nodes where a gang
would not fit on it. Both averages are over the jobs that completed in both runs. A tenant
guaranteed nothing (best effort) was promised no slice and has no rho. Goal: rho <= 1 for
at least 95% of the tenant-windows with 10 or more jobs, and no rho above 1.5.

**Guarantee-fit wait**: the wait until first start of the jobs that fit, at submit, in
their tenant's unused guarantee (guaranteed GPUs minus the GPUs it runs and has queued
then): the jobs the guarantee promises to start at once."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .policy.data import Node, Quota, RunningJob
from .policy.entitlement import water_fill

__all__ = [
    "RHO_GOAL_MAX",
    "RHO_GOAL_SHARE",
    "RHO_MIN_JOBS",
    "check_state",
    "jain_index",
    "percentile",
    "sharing_ratios",
    "slice_gpus",
    "slice_nodes",
    "stats",
    "trace_fairness",
    "water_fill",
    "window_fairness",
]

RHO_MIN_JOBS = 10  # tenant-windows with fewer jobs are reported, not judged
RHO_GOAL_SHARE = 0.95  # ... of the judged tenant-windows with rho <= 1
RHO_GOAL_MAX = 1.5  # ... and none above this


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return float(s[k])


def jain_index(xs: Sequence[float]) -> float:
    xs = [x for x in xs]
    if not xs:
        return 1.0
    sq = sum(x * x for x in xs)
    if sq == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sq)


def check_state(
    nodes: Sequence[Node], quotas: Mapping[str, Quota], running: Sequence[RunningJob]
) -> tuple[int, int]:
    """Independent invariant check: (quota violations, capacity/gang violations)."""
    by_name = {n.name: n for n in nodes}
    ug: dict[str, list[float]] = {n.name: [0, 0.0, 0] for n in nodes}
    tg: dict[str, list[float]] = {}
    cap_bad = 0
    for rj in running:
        r = rj.request
        if sum(rj.placement.values()) != r.workers:
            cap_bad += 1
        for name, w in rj.placement.items():
            if name not in by_name or w <= 0:
                cap_bad += 1
                continue
            u = ug[name]
            u[0] += w * r.gpus_per_worker
            u[1] += w * r.cpus_per_worker
            u[2] += w * r.memory_mb_per_worker
        t = tg.setdefault(r.tenant, [0, 0.0, 0, 0])
        t[0] += r.total_gpus
        t[1] += r.total_cpus
        t[2] += r.total_memory_mb
        t[3] += 1
    for name, (g, c, m) in ug.items():
        n = by_name[name]
        if g > n.gpus or c > n.cpus + 1e-6 or m > n.memory_mb:
            cap_bad += 1
    quota_bad = 0
    for tenant, (g, c, m, j) in tg.items():
        q = quotas.get(tenant)
        if q is None:
            quota_bad += 1
            continue
        if g > q.guaranteed_gpus + q.borrow_limit_gpus:
            quota_bad += 1
        if q.max_cpus is not None and c > q.max_cpus + 1e-6:
            quota_bad += 1
        if q.max_memory_mb is not None and m > q.max_memory_mb:
            quota_bad += 1
        if q.max_jobs is not None and j > q.max_jobs:
            quota_bad += 1
    return quota_bad, cap_bad


def stats(xs: Sequence[float], prefix: str) -> dict[str, float]:
    return {
        f"avg_{prefix}_s": round(sum(xs) / len(xs), 1) if xs else 0.0,
        f"p50_{prefix}_s": round(percentile(xs, 50), 1),
        f"p95_{prefix}_s": round(percentile(xs, 95), 1),
    }


# --------------------------------------------------------------------------- sharing incentive


def _gang_fits(nodes: Sequence[Node], workers: int, gpus_per_worker: int) -> bool:
    if gpus_per_worker <= 0:
        return True
    return sum(n.gpus // gpus_per_worker for n in nodes) >= workers


def slice_nodes(gpus: int, shape: Node) -> list[Node]:
    """A private cluster of ``gpus`` GPUs in nodes of ``shape`` (CPUs and memory in
    proportion to GPUs), the last node holding the remainder."""
    per = max(shape.gpus, 1)
    full, rest = divmod(gpus, per)
    sizes = [per] * full + ([rest] if rest else [])
    return [
        Node(f"slice-{i:03d}", g, shape.cpus * g / per, shape.memory_mb * g // per, shape.gpu_model)
        for i, g in enumerate(sizes)
    ]


def slice_gpus(guaranteed: int, gangs: Sequence[tuple[int, int]], shape: Node) -> int:
    """The GPUs of a tenant's private slice: its guarantee, rounded up to its widest job
    (``gangs`` = (workers, GPUs per worker) of its jobs), then to whole nodes if a gang
    would not fit on the partial last node. 0 for a tenant guaranteed nothing."""
    if guaranteed <= 0:
        return 0
    gpus = max([guaranteed, *(w * g for w, g in gangs)])
    nodes = slice_nodes(gpus, shape)
    if not all(_gang_fits(nodes, w, g) for w, g in set(gangs)):
        per = max(shape.gpus, 1)
        gpus = -(-gpus // per) * per
    return gpus


def sharing_ratios(
    shared_jct: Mapping[str, Mapping[str, float]],
    private_jct: Mapping[str, Mapping[str, float]],
    slices: Mapping[str, int],
) -> dict[str, dict]:
    """Per tenant: rho = average shared JCT / average private-slice JCT over the jobs that
    completed in both (``*_jct``: tenant -> {job id: JCT}); ``rho`` is None for a tenant
    without a slice (guaranteed nothing) or without such jobs."""
    out: dict[str, dict] = {}
    for tenant, shared in shared_jct.items():
        private = private_jct.get(tenant, {})
        common = [jid for jid in shared if jid in private]
        gpus = slices.get(tenant, 0)
        row: dict = {"jobs": len(common), "slice_gpus": gpus, "rho": None,
                     "avg_jct_shared_s": None, "avg_jct_private_s": None}
        if gpus > 0 and common:
            s = sum(shared[j] for j in common) / len(common)
            p = sum(private[j] for j in common) / len(common)
            row.update(avg_jct_shared_s=round(s, 1), avg_jct_private_s=round(p, 1),
                       rho=round(s / p, 4) if p > 0 else None)
        out[tenant] = row
    return out


def window_fairness(
    ratios: Mapping[str, Mapping], fit_waits: Sequence[float], min_jobs: int = RHO_MIN_JOBS
) -> dict:
    """One window's summary: the tenants judged (a rho and ``min_jobs`` or more jobs), how
    many have rho <= 1, the largest rho, and the guarantee-fit waits (p50, p95, max)."""
    judged = [r["rho"] for r in ratios.values() if r["rho"] is not None and r["jobs"] >= min_jobs]
    return {
        "tenants_judged": len(judged),
        "tenants_rho<=1": sum(1 for x in judged if x <= 1.0),
        "max_rho": max(judged) if judged else None,
        "guarantee_fit_jobs": len(fit_waits),
        "guarantee_fit_p50_wait_s": round(percentile(fit_waits, 50), 1),
        "guarantee_fit_p95_wait_s": round(percentile(fit_waits, 95), 1),
        "guarantee_fit_max_wait_s": round(max(fit_waits, default=0.0), 1),
    }


def trace_fairness(windows: Sequence[Mapping]) -> dict:
    """Over the windows of a trace (``window_fairness`` results): the share of judged
    tenant-windows with rho <= 1, the largest rho, whether both rho goals hold, and the
    worst window's p95 guarantee-fit wait."""
    judged = sum(w["tenants_judged"] for w in windows)
    good = sum(w["tenants_rho<=1"] for w in windows)
    rmax = max((w["max_rho"] for w in windows if w["max_rho"] is not None), default=None)
    share = good / judged if judged else 1.0
    return {
        "tenant_windows_judged": judged,
        "tenant_windows_rho<=1": good,
        "share_rho<=1": round(share, 4),
        "max_rho": rmax,
        "rho_goals_met": share >= RHO_GOAL_SHARE and (rmax is None or rmax <= RHO_GOAL_MAX),
        "guarantee_fit_p95_wait_s_worst_window": max(
            (w["guarantee_fit_p95_wait_s"] for w in windows), default=0.0),
    }
