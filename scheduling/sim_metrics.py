"""What the trace simulator measures: percentiles, Jain's index (against the weighted
max-min fair shares of ``policy.entitlement``) and the independent quota / capacity check
run after every pass. Pure functions, no Django."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .policy.data import Node, Quota, RunningJob
from .policy.entitlement import water_fill

__all__ = ["check_state", "jain_index", "percentile", "stats", "water_fill"]


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
