"""Ordering and fair share: the order in which one pass considers the pending jobs."""

from __future__ import annotations

import bisect
import collections
import heapq
import itertools
import math
import operator
from operator import attrgetter, itemgetter

from .data import INF, JobRequest, PolicyConfig, Snapshot
from .entitlement import entitled_now
from .quotas import PassState, RunningUsage, changed_objects

# A tenant's entitlement is never taken as less than this many GPUs (it divides).
_MIN_SHARE = 0.05
# Jobs in a row without an admission before the merge orders the rest at once (at least;
# Ranker._merged).
_AT_ONCE_AFTER = 256
_ID = attrgetter("id")
_TENANT = attrgetter("tenant")
_NEGP = itemgetter(0)  # of a queue entry (``_entry``): -priority (x levels + its level)
_TIME = itemgetter(1)  # ... its virtual submit time
_REQUEST = itemgetter(4)  # ... and its request


def _sort_queue(queue: list) -> None:
    """Sort a tenant's queue by (-priority, virtual submit time, submit time, id): ids are
    unique, so the comparison never reaches the request. Where no two virtual submit times
    are equal (the usual case), two sorts on one number each give that order faster than
    comparing tuples: by time, then stably by priority."""
    by_time = itemgetter(1)
    queue.sort(key=by_time)
    if len(set(map(by_time, queue))) == len(queue):
        queue.sort(key=itemgetter(0))
    else:
        queue.sort()


def _entry(r: JobRequest, params: tuple, typical: float, attained) -> tuple:
    """A pending job's place in its tenant's queue: (-priority (x levels + its level of
    attained service), virtual submit time, submit time, id, the request)."""
    per_s, single, cap, thresholds = params
    est = r.estimated_duration
    g = r.workers * r.gpus_per_worker
    v = submit = r.submit_time
    if g:  # a CPU-only job holds no GPUs: it keeps its submit time
        shift = per_s * (typical if est is None else est) * (g * g + single)
        v += shift if shift < cap else cap
    negp = -r.priority
    if thresholds:
        negp *= len(thresholds) + 1
        got = attained.get(r.id)
        if got:
            negp += sum(1 for th in thresholds if got >= th)
    return (negp, v, submit, r.id, r)


def _typical(pend) -> float:
    """What a job without an estimate counts as: the median estimate of those that have one
    (neither ahead of nor behind a typical job for leaving its timeout unset)."""
    if all(r.estimated_duration is not None for r in pend):
        return 0.0  # (unused)
    known = sorted(r.estimated_duration for r in pend if r.estimated_duration is not None)
    return known[(len(known) - 1) // 2] if known else 0.0


def _ranked_queues(pend, params: tuple, attained) -> tuple[dict[str, list], dict[str, int]]:
    """Each tenant's queue in rank order (``_entry``), and the GPUs its pending jobs want."""
    typical = _typical(pend)
    per_s, single, cap, thresholds = params
    levels = len(thresholds) + 1
    queues: dict[str, list] = {}
    wanted: dict[str, int] = {}
    for r in pend:  # the one loop over up to 10,000 jobs here: _entry inline, kept flat
        est = r.estimated_duration
        g = r.workers * r.gpus_per_worker
        v = submit = r.submit_time
        if g:
            shift = per_s * (typical if est is None else est) * (g * g + single)
            v += shift if shift < cap else cap
        negp = -r.priority
        if thresholds:
            negp *= levels
            got = attained.get(r.id)
            if got:
                negp += sum(1 for th in thresholds if got >= th)
        t = r.tenant
        queue = queues.get(t)
        if queue is None:
            queue = queues[t] = []
        queue.append((negp, v, submit, r.id, r))
        wanted[t] = wanted.get(t, 0) + g
    for queue in queues.values():
        _sort_queue(queue)
    return queues, wanted


class QueueCache:
    """The tenants' ranked queues kept from one pass to the next (``schedule(..., cache=)``),
    so that a pass ranks only the jobs that are new or changed since the pass before: a job
    is unchanged while the snapshot holds the same ``JobRequest`` object for its id (the
    simulator keeps them; live admission builds new ones from the database every pass and
    passes no cache). Jobs
    without an estimate are ranked again when the median estimate moves, a job whose
    attained service crosses a level when it does, and everything when the cluster's GPUs
    or the ranking's settings change. The queues are then exactly those ``_ranked_queues``
    builds (tests/scheduling/test_pass_equivalence.py). It keeps the running jobs' sums
    too (``running``: ``RunningUsage``)."""

    __slots__ = ("params", "pending", "entries", "queues", "wanted", "estimates",
                 "no_estimate", "typical", "levels", "shape_of", "shapes", "running")

    def __init__(self) -> None:
        self.params: tuple | None = None
        self.running = RunningUsage()
        # For SchedulePass.run: each job's shape as a number, and the shapes numbered.
        self.shape_of: dict[str, int] = {}
        self.shapes: dict[tuple, int] = {}

    def update(self, pend, params: tuple, attained) -> tuple[dict[str, list], dict[str, int]]:
        """The queues and pending GPUs for ``pend``, as ``_ranked_queues`` gives them."""
        pend = list(pend)
        changed = None if params != self.params else changed_objects(self.pending, pend)
        if changed is None:
            return self._rebuild(pend, params, attained)
        self.pending = pend
        gone, new = changed
        again: dict[str, JobRequest] = {}  # job id -> its request, to be ranked (again)
        shape_of = self.shape_of
        for r in gone:
            self._remove(r.id)
            shape_of.pop(r.id, None)
        for r in new:
            self._note(r)
            again[r.id] = r
        thresholds = params[3]
        if thresholds:  # a job whose attained service is at another level now
            levels, entries = self.levels, self.entries
            maybe = attained.keys() & entries.keys()
            maybe.update(levels.keys())
            for job_id in maybe:
                got = attained.get(job_id)
                level = sum(1 for th in thresholds if got >= th) if got else 0
                if level != levels.get(job_id, 0):
                    again[job_id] = self._remove(job_id, keep_estimate=True)
        if not again and not gone:
            return self._view()
        typical = self._median()
        if typical != self.typical and self.no_estimate:
            for job_id in self.no_estimate - again.keys():
                again[job_id] = self._remove(job_id, keep_estimate=True)
        self.typical = typical
        for job_id, r in again.items():
            entry = self.entries[job_id] = _entry(r, params, typical, attained)
            if thresholds and entry[0] != -r.priority * (len(thresholds) + 1):
                self.levels[job_id] = entry[0] + r.priority * (len(thresholds) + 1)
            queue = self.queues.get(r.tenant)
            if queue is None:
                self.queues[r.tenant] = [entry]
            else:
                bisect.insort(queue, entry)
        if len(self.entries) != len(pend):  # two jobs with one id: nothing to keep
            return self._rebuild(pend, params, attained)
        return self._view()

    def _rebuild(self, pend: list, params: tuple, attained):
        """Rank every job anew (kept for the next pass unless two jobs share an id)."""
        self.shape_of.clear()
        self.shapes.clear()
        queues, wanted = _ranked_queues(pend, params, attained)
        self.params, self.queues, self.wanted = params, queues, wanted
        self.pending = pend
        self.entries = {x[3]: x for queue in queues.values() for x in queue}
        self.estimates = sorted(r.estimated_duration for r in pend
                                if r.estimated_duration is not None)
        self.no_estimate = {r.id for r in pend if r.estimated_duration is None}
        self.typical = self._median()
        levels = len(params[3]) + 1
        self.levels = {job_id: x[0] + x[4].priority * levels
                       for job_id, x in self.entries.items()
                       if x[0] != -x[4].priority * levels}
        if len(self.entries) != len(pend):
            self.params = None  # two jobs with one id: nothing to keep
            self.shape_of.clear()
        return queues, wanted

    def _view(self):
        return {t: q for t, q in self.queues.items() if q}, self.wanted

    def _median(self) -> float:
        known = self.estimates
        return known[(len(known) - 1) // 2] if self.no_estimate and known else 0.0

    def _note(self, r: JobRequest) -> None:
        """Count a job's GPUs and estimate in (``_remove`` counts them out)."""
        self.wanted[r.tenant] = self.wanted.get(r.tenant, 0) + r.workers * r.gpus_per_worker
        if r.estimated_duration is None:
            self.no_estimate.add(r.id)
        else:
            bisect.insort(self.estimates, r.estimated_duration)

    def _remove(self, job_id: str, keep_estimate: bool = False) -> JobRequest:
        """Take a job out of its queue (and its GPUs and estimate out of the counts, unless
        ``keep_estimate``: it is ranked again); returns its request."""
        entry = self.entries.pop(job_id)
        r = entry[4]
        queue = self.queues[r.tenant]
        i = bisect.bisect_left(queue, entry)
        assert queue[i] is entry
        del queue[i]
        self.levels.pop(job_id, None)
        if not keep_estimate:
            self.wanted[r.tenant] -= r.workers * r.gpus_per_worker
            if r.estimated_duration is None:
                self.no_estimate.discard(job_id)
            else:
                known = self.estimates
                del known[bisect.bisect_left(known, r.estimated_duration)]
        return r


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
                 "guar", "head_found", "now", "bonus", "cl", "admissions", "moved")
    # (The level of attained service rides in the priority slot: -priority x (levels + 1)
    # + level, so the queue tuples keep their shape.)

    def __init__(
        self, snapshot: Snapshot, common: PassState, cfg: PolicyConfig, now: float,
        queue_cache: QueueCache | None = None,
    ) -> None:
        self.cfg = cfg
        self.cl = common.cl
        self.head_found = lambda: False
        self.now = now
        pend = snapshot.pending
        self.plain = not cfg.fair_share
        if self.plain:
            pend = sorted(pend, key=lambda r: (-r.priority, r.submit_time, r.id))
            self.queues = {"": pend}
            self.pos = {"": 0}
            self.heap = []
            return
        # Each tenant's queue in rank order, and the GPUs its pending jobs want.
        params = (cfg.size_weight / max(sum(common.cl.cap_g), 1), cfg.size_single_gpu - 1,
                  cfg.size_shift_cap_s,
                  # Levels only where some job has attained service (none: every level is 0).
                  cfg.las_thresholds_gpu_s
                  if cfg.guarantees_before_rank and snapshot.attained else ())
        if queue_cache is None:
            queues, wanted = _ranked_queues(pend, params, snapshot.attained)
        else:
            queues, wanted = queue_cache.update(pend, params, snapshot.attained)
        # What each tenant wants now (running + pending GPUs), for its share below (in
        # one order whatever the queues' order, for the same sums).
        used = common.used_g
        demand = {t: used.get(t, 0) + wanted.get(t, 0)
                  for t in sorted(used.keys() | wanted.keys())}
        hist, ent = snapshot.usage_history, snapshot.entitled_history
        window = max(cfg.usage_window_s, 1e-9)
        now_share = entitled_now(sum(common.cl.cap_g), demand, common.quotas)
        self.service: dict[str, float] = {}
        self.share: dict[str, float] = {}
        for t in queues:
            self.share[t] = max(ent.get(t, 0.0) / window + now_share.get(t, 0.0), _MIN_SHARE)
            self.service[t] = hist.get(t, 0.0) / window + common.used_g.get(t, 0)
        self.used = {t: common.used_g.get(t, 0) for t in queues}
        self.guar = {t: common.guaranteed.get(t, 0) for t in queues}
        self.queues = queues
        self.pos = dict.fromkeys(queues, 0)
        self.ver = dict.fromkeys(queues, 0)
        self.bonus = {t: self._bonus(t) for t in queues}
        self.heap: list = []
        self.admissions = 0
        # Tenants admitted to before the merge (``_before_ranked``), whose heads the merge
        # pushes once as it starts; None once it has (``admitted`` pushes them itself).
        self.moved: dict[str, None] | None = {}
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
            return iter(self.queues[""])
        done: set[str] = set()
        # (chain, not a generator around both: one frame less for each of 10,000 jobs.)
        return itertools.chain(self._before_ranked(done), self._merged(done))

    def _before_ranked(self, done: set[str]):
        """The jobs that go before the ranked merge (guarantees, the tail guard, FIFO
        head), each added to ``done``."""
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

    def _merged(self, done: set[str]):
        """The tenants' queues merged by their heads' keys (``_push``): the job at the top of
        the heap is yielded, and its tenant's next job replaces it there, in one step unless
        an admission (``admitted``) moved the tenant's key meanwhile. Once a run of jobs has
        gone by without an admission (most of a long queue waits), the rest is ordered at
        once (``_rest_in_order``) and walked until an admission moves the keys again."""
        for t in self.moved:  # (their keys as they are now: pushed once, not per admission)
            self.bonus[t] = self._bonus(t)
            self._push(t)
        self.moved = None
        heap, pos, queues, ver, bonus = self.heap, self.pos, self.queues, self.ver, self.bonus
        boost = self.cfg.guarantee_boost_s
        heappop, heapreplace = heapq.heappop, heapq.heapreplace
        # Jobs since the last admission, and the most that went by between two admissions:
        # ordering the rest at once pays where admissions have stopped, so it waits for a
        # run four times that long (a queue that keeps admitting stays on the heap).
        calm = longest = 0
        at_once_after = _AT_ONCE_AFTER  # max(_AT_ONCE_AFTER, 4 * longest)
        at_once = not boost  # (the boost is per job: only the heap is exact with it)
        while heap:
            if at_once and calm >= at_once_after:
                rest = self._rest_in_order()
                if rest is None:  # two keys tie: only the heap is exact here
                    at_once = False
                    continue
                # Walk the rest up to the first admission (inline: the loop most of a long
                # queue goes through), then take up the merge from there (_walked).
                admissions = self.admissions
                taken = len(rest)
                for k, r in enumerate(rest):
                    if r.id not in done:
                        yield r
                        if self.admissions != admissions:
                            taken = k + 1
                            break
                self._walked(rest, taken)
                calm, longest = 0, max(longest, calm + taken - 1)  # an admission came
                at_once_after = max(_AT_ONCE_AFTER, 4 * longest)
                continue
            top = heap[0]
            t = top[4]
            if top[5] != ver[t]:
                heappop(heap)  # pushed before an admission moved the tenant's key
                continue
            queue = queues[t]
            i = pos[t]
            pos[t] = i + 1
            r = queue[i][4]
            if r.id not in done:
                admissions = self.admissions
                yield r
                if self.admissions != admissions:  # r was admitted: the heap changed
                    if calm > longest:
                        longest = calm
                        at_once_after = max(_AT_ONCE_AFTER, 4 * longest)
                    calm = 0
                    if ver[t] == top[5]:  # (its tenant's next job is there, unless ...)
                        ver[t] += 1
                        self._push(t)
                    continue
                calm += 1
            if i + 1 < len(queue):
                negp, v, sub, rid, r = queue[i + 1]
                v += bonus[t]
                if boost and self.used[t] + r.workers * r.gpus_per_worker <= self.guar[t]:
                    v -= boost
                heapreplace(heap, (negp, v, sub, rid, t, top[5]))
            else:
                heappop(heap)

    def _rest_in_order(self) -> list[JobRequest] | None:
        """Every job not yet merged, in the order the heap would merge them while no job is
        admitted: by (-priority, virtual submit time + its tenant's bonus), as ``_push`` keys
        a head. Each tenant's queue is in that order, a run of jobs per priority; where no two
        times within a priority are equal, the runs of each priority are ordered by time
        alone (a sort on one number); None where two are equal (or not a number), for the
        heap to break the tie by submit time and id."""
        by_priority: dict[int, tuple[list, list]] = {}  # -priority -> (jobs, their times)
        for t, queue in self.queues.items():
            i, n = self.pos[t], len(queue)
            while i < n:
                negp = queue[i][0]
                end = n if queue[-1][0] == negp else bisect.bisect_right(
                    queue, negp, i, n, key=_NEGP)
                run = queue[i:end]
                group = by_priority.get(negp)
                if group is None:
                    group = by_priority[negp] = ([], [])
                group[0].extend(run)
                group[1].extend(map(operator.add, map(_TIME, run),
                                    itertools.repeat(self.bonus[t])))
                i = end
        rest: list[JobRequest] = []
        for negp in sorted(by_priority):
            jobs, times = by_priority[negp]
            if len(set(times)) != len(times) or math.isnan(sum(times)):
                return None
            order = sorted(range(len(times)), key=times.__getitem__)
            rest += map(_REQUEST, map(jobs.__getitem__, order))
        return rest

    def _walked(self, rest: list[JobRequest], taken: int) -> None:
        """The first ``taken`` jobs of ``rest`` (``_rest_in_order``) went by: each tenant's
        position moves past its jobs among them, and the heap holds the tenants' next jobs."""
        pos = self.pos
        if taken == len(rest):  # all of it: every queue is through
            for t, queue in self.queues.items():
                pos[t] = len(queue)
        else:
            for t, n in collections.Counter(map(_TENANT, itertools.islice(rest, taken))).items():
                pos[t] += n
        self.heap.clear()
        for t in self.queues:
            self.ver[t] += 1
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
        t, gpus = r.tenant, r.total_gpus
        self.service[t] += gpus
        self.used[t] += gpus
        self.ver[t] += 1  # (its head in the heap is out of date)
        self.admissions += 1
        if self.moved is None:
            self.bonus[t] = self._bonus(t)
            self._push(t)
        else:  # before the merge: its head is pushed as the merge starts
            self.moved[t] = None
