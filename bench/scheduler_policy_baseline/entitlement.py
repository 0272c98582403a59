"""Entitlement: each tenant's weighted max-min fair share of the cluster's GPUs, now and over
the recent past. Fair share ranks tenants by the GPUs they received over the GPUs they were
entitled to, where the entitlement follows demand: a tenant with nothing queued is entitled
to nothing, and the GPUs it leaves idle are shared among the others by weight (water-filling
over weight x guaranteed GPUs, each demand capped by the tenant's quota limit). The trace
simulator's Jain's index measures fairness against the very same shares."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from .data import Quota


def tenant_weight(q: Quota | None) -> float:
    """The tenant's weight in sharing: its quota's weight x guaranteed GPUs (at least half a
    GPU, so a tenant guaranteed nothing still gets a share of idle GPUs)."""
    if q is None:
        return 1e-9
    return max(q.weight, 1e-9) * max(float(q.guaranteed_gpus), 0.5)


def water_fill(
    capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]
) -> dict[str, float]:
    """Weighted max-min fair split of ``capacity`` among ``demand``s."""
    alloc = {t: 0.0 for t in demand}
    active = [t for t, d in demand.items() if d > 0]
    left = capacity
    while active and left > 1e-9:
        wsum = sum(weight[t] for t in active)
        level = left / wsum
        sat = [t for t in active if demand[t] - alloc[t] <= weight[t] * level + 1e-12]
        if not sat:
            for t in active:
                alloc[t] += weight[t] * level
            break
        for t in sat:
            left -= demand[t] - alloc[t]
            alloc[t] = demand[t]
        active = [t for t in active if t not in sat]
    return alloc


def entitled_now(
    capacity: float, demand_gpus: Mapping[str, float], quotas: Mapping[str, Quota]
) -> dict[str, float]:
    """GPUs each tenant is entitled to while it wants ``demand_gpus`` (pending + running):
    the weighted max-min split, each demand capped by the tenant's quota limit (a tenant
    without a quota can hold nothing)."""
    dem = {
        t: float(min(d, quotas[t].max_gpus)) if t in quotas else 0.0
        for t, d in demand_gpus.items()
        if d > 0
    }
    return water_fill(capacity, dem, {t: tenant_weight(quotas.get(t)) for t in dem})


def entitled_history(
    intervals: Iterable[tuple[str, float, float, float]],
    quotas: Mapping[str, Quota],
    capacity: float,
    now: float,
    window_s: float,
    resolution_s: float = 300.0,
) -> dict[str, float]:
    """Decayed entitled GPU-seconds per tenant from demand ``intervals`` (tenant, GPUs, from,
    to): the integral of ``entitled_now`` over the past, each second weighted by
    exp(-age / window_s), as the decayed usage is. Demand changes are taken at
    ``resolution_s`` (so the work is bounded by the look-back, not by the number of jobs);
    times after ``now`` count up to ``now``."""
    deltas: dict[float, dict[str, float]] = {}
    for tenant, gpus, start, end in intervals:
        end = min(end, now)
        if gpus <= 0 or end <= start:
            continue
        for at, d in ((start, gpus), (end, -gpus)):
            slot = deltas.setdefault(at // resolution_s * resolution_s, {})
            slot[tenant] = slot.get(tenant, 0.0) + d
    weight = {t: tenant_weight(q) for t, q in quotas.items()}
    limit = {t: float(q.max_gpus) for t, q in quotas.items()}
    out: dict[str, float] = {}
    demand: dict[str, float] = {}
    times = sorted(deltas)
    for i, at in enumerate(times):
        for tenant, d in deltas[at].items():
            demand[tenant] = demand.get(tenant, 0.0) + d
        nxt = times[i + 1] if i + 1 < len(times) else now
        a, b = min(at, now), min(nxt, now)
        if b <= a:
            continue
        # The integral of exp(-(now - t) / w) from a to b.
        span = window_s * (math.exp(-(now - b) / window_s) - math.exp(-(now - a) / window_s))
        # entitled_now, with the weights and limits looked up once.
        dem = {t: min(d, limit[t]) for t, d in demand.items() if d > 0 and t in limit}
        for tenant, gpus in water_fill(capacity, dem, weight).items():
            if gpus > 0:
                out[tenant] = out.get(tenant, 0.0) + gpus * span
    return out
