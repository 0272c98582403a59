"""Ordering and fair share: the order in which one pass considers the pending jobs."""

from __future__ import annotations

import heapq
import math

from .data import INF, JobRequest, PolicyConfig, Snapshot
from .entitlement import entitled_now
from .quotas import PassState

# A tenant's entitlement is never taken as less than this many GPUs (it divides).
_MIN_SHARE = 0.05


class Ranker:
    """The pass order, produced lazily because it depends on this pass's admissions.

    Within a tenant, jobs are ordered by (priority desc, *virtual submit time*, id): the
    submit time pushed back by ``size_weight`` x estimate x (GPUs^2 - 1 +
    ``size_single_gpu``) / cluster GPUs, at most ``size_shift_cap_s``. Small jobs go ahead
    of wide, long ones submitted a little earlier (work that would hold many GPUs waits for
    the work behind it that is a small fraction of its size); no job is passed by one
    submitted more than the cap after it, so nothing starves; a CPU-only job is not moved.
    A job without an estimate counts as the median estimate of the queued jobs that have
    one (and it is never backfilled past a reservation). Across tenants the heads of the
    tenants' queues are merged by (priority desc, virtual submit time + ``fair_share_s`` x
    log2(service / entitlement)). A tenant's *service* is the GPUs it received (decayed
    usage over the window + GPUs running now, including jobs admitted earlier in this
    pass); its *entitlement* is the GPUs it was entitled to on the same decay
    (``Snapshot.entitled_history``) + its weighted max-min share of the demand now
    (``entitlement.entitled_now``: pending + running GPUs, capped by quota, weights =
    weight x guaranteed GPUs). A tenant that received twice its entitlement is pushed back
    by ``fair_share_s``, one that received half is brought forward by it. GPUs a tenant
    took while nobody else wanted them are not held against it (it was entitled to them),
    and its *pending* jobs only raise its entitlement (up to its weighted share), so
    submitting many short jobs costs nothing. A preempted job is requeued with its
    original submit time, so it keeps its place. With ``guarantee_first`` (off by default)
    jobs that fit in their tenant's guarantee and in the free capacity come before all of
    this (``_within_guarantee``).

    With ``guarantees_before_rank`` (the default, issue 40) the jobs that fit in their
    tenant's unused guarantee come first of all (``_guaranteed``), and the rest, the work
    that borrows, is ordered within the same priority by its attained-service level
    (``las_thresholds_gpu_s`` over ``Snapshot.attained``: least served first, as Tiresias)
    before the size-weighted submit time; across tenants fair share (service over
    entitlement) still applies to it.
    """

    __slots__ = ("heap", "queues", "pos", "service", "share", "cfg", "ver", "plain", "used",
                 "guar", "head_found", "now", "bonus", "cl")
    # (The level of attained service rides in the priority slot: -priority x (levels + 1)
    # + level, so the queue tuples keep their shape.)

    def __init__(
        self, snapshot: Snapshot, common: PassState, cfg: PolicyConfig, now: float
    ) -> None:
        self.cfg = cfg
        self.cl = common.cl
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
        # A job without an estimate counts as the median estimate of those that have one:
        # neither ahead of nor behind a typical job for leaving its timeout unset.
        known = sorted(r.estimated_duration for r in pend if r.estimated_duration is not None)
        typical = known[(len(known) - 1) // 2] if known else 0.0
        queues: dict[str, list] = {}
        per_s = cfg.size_weight / max(sum(common.cl.cap_g), 1)
        single, cap = cfg.size_single_gpu - 1, cfg.size_shift_cap_s
        # Levels only where some job has attained service (none: every level is 0).
        thresholds = (cfg.las_thresholds_gpu_s
                      if cfg.guarantees_before_rank and snapshot.attained else ())
        levels = len(thresholds) + 1
        attained = snapshot.attained
        for r in pend:
            est = r.estimated_duration
            g = r.total_gpus
            v = r.submit_time
            if g:  # a CPU-only job holds no GPUs: it keeps its submit time
                shift = per_s * (typical if est is None else est) * (g * g + single)
                v += shift if shift < cap else cap
            negp = -r.priority
            if thresholds:
                negp *= levels
                got = attained.get(r.id)
                if got:
                    negp += sum(1 for th in thresholds if got >= th)
            queues.setdefault(r.tenant, []).append((negp, v, r.submit_time, r.id, r))
        for q in queues.values():
            q.sort()  # ids are unique, so the comparison never reaches the request
        hist, ent = snapshot.usage_history, snapshot.entitled_history
        window = max(cfg.usage_window_s, 1e-9)
        demand = dict(common.used_g)
        for r in pend:
            demand[r.tenant] = demand.get(r.tenant, 0) + r.total_gpus
        now_share = entitled_now(sum(common.cl.cap_g), demand, common.quotas)
        self.service: dict[str, float] = {}
        self.share: dict[str, float] = {}
        for t in queues:
            self.share[t] = max(ent.get(t, 0.0) / window + now_share.get(t, 0.0), _MIN_SHARE)
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
        if self.cfg.guarantees_before_rank:
            yield from self._guaranteed(done)
        if self.cfg.guarantee_first:
            yield from self._within_guarantee(done)
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
                if r.id not in done:
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

    def _guaranteed(self, done: set[str]):
        """Jobs that fit in their tenant's unused guarantee, before any ranking across
        tenants: tenants with the smallest part of their guarantee in use first, each
        tenant's jobs in its own rank order, each job taking its GPUs out of what is left of
        the guarantee whether or not it starts (a job that cannot start holds the
        reservation or reclaims borrowed GPUs; the next ones of its tenant must still fit
        beside it). A job that does not fit what is left goes to the ranked rest, except
        the first job of a tenant that runs nothing, however wide."""
        tenants = sorted((t for t in self.queues if self.guar[t] > self.used[t]),
                         key=lambda t: (self.used[t] / self.guar[t],
                                        self.service[t] / self.share[t], t))
        for t in tenants:
            left = self.guar[t] - self.used[t]
            idle = left == self.guar[t]
            for x in self.queues[t]:
                r = x[4]
                gpus = r.total_gpus
                if r.id in done or gpus == 0:
                    continue
                if gpus <= left or idle:
                    # A tenant running nothing: its first job counts as within its
                    # guarantee however wide (the private slice rounded up to it, as the
                    # sharing incentive measures it); it still borrows the GPUs beyond.
                    left -= gpus
                    idle = False
                    done.add(r.id)
                    yield r
                    if left <= 0:
                        break

    def _within_guarantee(self, done: set[str]):
        """Jobs that fit in their tenant's guarantee (GPUs running now, including this pass's
        admissions) *and* in the free capacity now go first, before the tail guard: a tenant
        below its guaranteed share does not queue behind tenants that borrow. Tenants least
        served relative to their share first; within a tenant, in rank order. A job that
        does not fit now is left to the usual order (so a large gang within its guarantee
        does not take the reservation ahead of the tail). A tenant's guarantee is finite, so
        this takes at most the guarantees' worth of GPUs per pass; but jobs started here are
        not held to the EASY reservation (it is made later in the pass), so they can delay
        the head of the tail guard (seen on some Philly windows as a worse p95 wait)."""
        cl = self.cl
        tenants = sorted(self.queues, key=lambda t: (self.service[t] / self.share[t], t))
        for t in tenants:
            for x in self.queues[t]:
                r = x[4]
                if self.used[t] >= self.guar[t] or cl.free_g <= 0:
                    break
                if (r.id in done or self.used[t] + r.total_gpus > self.guar[t]
                        or r.total_gpus > cl.free_g):
                    continue
                if r.workers == 1 and cl.find(
                    r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker, r.gpu_model,
                    False,
                ) < 0:
                    continue
                done.add(r.id)
                yield r

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
            if r.id not in done:
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
