"""Gantry's GPU scheduling policy: a pure function from a cluster snapshot to a decision.

No Django, no I/O, no clocks: the live scheduler and the trace simulator call the very same
``schedule(snapshot, now)`` once per scheduling pass.

Policy, in order of application (see ``schedule``):

1. **Ranking** (``Ranker``). Pending jobs are ordered by priority (higher first), then by
   a *virtual submit time*: the submit time pushed back by ``size_weight`` x the job's
   estimate (its timeout; a job without one counts as the queue's median estimate) x
   (GPUs^2 - 1 + ``size_single_gpu``) / the cluster's GPUs, at most ``size_shift_cap_s``
   (a day). A wide, long gang yields to the small jobs submitted in the hours after it, a
   1-GPU job hardly moves (a 7-day timeout: 20 minutes on 64 GPUs), and no job is passed by
   one submitted more than the cap after it. Plus ``fair_share_s`` (an hour) per doubling
   of what the tenant received over what it was entitled to (decayed GPU usage + GPUs
   running now, including jobs admitted earlier in the pass, over decayed entitled GPUs +
   its weighted max-min share of the demand now: ``entitlement``); minus
   ``guarantee_boost_s`` (default 0) while the job fits in its tenant's guarantee. GPUs a
   tenant took while nobody else wanted them are not held against it, and its *pending*
   jobs only raise its entitlement, so submitting many short jobs costs nothing. A
   preempted job keeps its submit time, hence its place. The opt-in tail guard
   (``fifo_tail_fraction``, ``fifo_age_s``) puts the oldest jobs first in submit order.
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

from .data import INF, Decision, JobRequest, PolicyConfig, Reservation, RunningJob, Snapshot
from .messages import finish_decision, human_duration, waiting_in_order
from .placement import fits_count
from .quotas import PassState
from .ranking import Ranker

__all__ = ["schedule", "schedule_fifo"]


# --------------------------------------------------------------------------- Gantry policy


class _Victim:
    __slots__ = ("rj", "end", "g")

    def __init__(self, rj: RunningJob, end: float) -> None:
        self.rj = rj
        self.end = end
        self.g = rj.request.total_gpus


def schedule(  # noqa: C901 - the hot loop; see the docstring
    snapshot: Snapshot, now: float, config: PolicyConfig | None = None
) -> Decision:
    """One scheduling pass of the Gantry policy (see the module docstring).

    One function on purpose (issue 21 allows the scheduler's hot loop over complexity
    20): a pass walks up to 10,000 pending jobs in one loop, and the per-job steps
    (memo lookups, placement, the preemption and reservation closures over the pass's
    local state) read and write a dozen locals; as separate functions each job would pay
    several extra calls and attribute lookups, which cost measurable time at that size
    (``bench/simulate.py``'s micro-benchmark). The parts that are not per job live in
    their own modules: ``data``, ``placement``, ``quotas``, ``ranking``, ``messages``.
    """
    cfg = config or PolicyConfig()
    common = PassState(snapshot)
    cl = common.cl
    quotas = common.quotas
    ranker = Ranker(snapshot, common, cfg, now)
    decision = Decision()
    admitted: set[str] = set()
    pre: dict[str, tuple[str, str, float | None]] = {}

    # Running jobs this pass may still end (estimated end, clamped to now when overrunning):
    # built on the first preemption search only (most passes never search; the reservation
    # reads the running jobs directly).
    live: dict[str, _Victim] = {}

    def end_of(rj: RunningJob) -> float:
        est = rj.request.estimated_duration
        return INF if est is None else max(rj.start_time + est, now)

    new_running: list[tuple[JobRequest, dict[str, int], float]] = []

    # Preemption candidates: which running jobs are borrowed right now.
    borrowed_ids: set[str] = set()
    if cfg.preemption:
        # Sort keys as plain tuples (ids are unique, so comparisons stop there).
        by_tenant: dict[str, list[tuple]] = {}
        for rj in common.running:
            r = rj.request
            key = (-r.priority, rj.start_time, r.id, r.workers * r.gpus_per_worker)
            jobs = by_tenant.get(r.tenant)
            if jobs is None:
                by_tenant[r.tenant] = [key]
            else:
                jobs.append(key)
        for t, jobs in by_tenant.items():
            q = quotas.get(t)
            guar = q.guaranteed_gpus if q else 0
            if sum(k[3] for k in jobs) <= guar:
                continue  # all within the guarantee: nothing borrowed, no sort needed
            jobs.sort()
            acc = 0
            for k in jobs:
                acc += k[3]
                if acc > guar:
                    borrowed_ids.add(k[2])
    min_prio = min((rj.request.priority for rj in common.running), default=None)
    own_min_prio: dict[str, int] = {}
    for rj in common.running:
        t, p = rj.request.tenant, rj.request.priority
        if p < own_min_prio.get(t, p + 1):
            own_min_prio[t] = p
    # Victims: lowest priority first, then least work lost (GPUs x time run), so the jobs
    # that have run longest are the last to lose their progress. Checkpoint-aware: least
    # work lost first (GPU-seconds since the last complete checkpoint), then priority.
    lost_of = snapshot.work_lost

    def lost(v: _Victim) -> float:
        return lost_of.get(v.rj.request.id, v.g * (now - v.rj.start_time))

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
        if not live:
            for rj in common.running:
                live[rj.request.id] = _Victim(rj, end_of(rj))
        if not victims_sorted and live:
            victims_sorted.extend(sorted(
                live.values(),
                key=(lambda v: (lost(v), v.rj.request.priority, v.rj.request.id))
                if cfg.checkpoint_aware
                else (lambda v: (v.rj.request.priority, lost(v), v.rj.request.id)),
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
                    and lost(v) <= max_loss
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
        caps = [fits_count(fg[i], fc[i], fm[i], g, c, m) if ok_model[i] else 0 for i in range(n)]
        total = sum(caps)
        T: float | None = now
        if total < r.workers:
            ends = [
                (end_of(rj), rj.request.id, rj.request, rj.placement)
                for rj in common.running
                if rj.request.id not in preempted
            ]
            ends.extend((e, jr.id, jr, p) for jr, p, e in new_running)
            ends.sort()  # by (end, id); ids are unique, so comparisons stop there
            T = None
            for e, _, jr, p in ends:
                jg, jc, jm = jr.gpus_per_worker, jr.cpus_per_worker, jr.memory_mb_per_worker
                for name, w in p.items():
                    i = cl.index.get(name)
                    if i is None:
                        continue
                    fg[i] += w * jg
                    fc[i] += w * jc
                    fm[i] += w * jm
                    if ok_model[i]:
                        k = fits_count(fg[i], fc[i], fm[i], g, c, m)
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
    # Shapes are numbered on first sight, so the memo keys below hash small ints, not the
    # six-field shape, once per job.
    shape_ids: dict[tuple, int] = {}
    static_memo: list[tuple[str, str] | None] = []
    state_memo: dict[tuple, tuple[int, tuple[str, str, float | None]]] = {}
    preempt_failed: dict[tuple, tuple[int, int]] = {}
    version = 0
    ranker.head_found = lambda: res_job is not None
    for r in ranker:
        rid = r.id
        shape_key = (r.tenant, r.workers, r.gpus_per_worker, r.cpus_per_worker,
                     r.memory_mb_per_worker, r.gpu_model)
        sid = shape_ids.get(shape_key)
        if sid is None:
            sid = shape_ids[shape_key] = len(static_memo)
            static_memo.append(common.too_large(r))
        tl = static_memo[sid]
        if tl is not None:
            pre[rid] = (tl[0], tl[1], None)
            continue
        est = r.estimated_duration
        constrained = False
        if res_job is not None:
            constrained = not (est is not None and res_T is not None and now + est <= res_T)
        mkey = (sid, constrained, r.priority)
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
    # Every job the ranker yielded is in `pre` (in yield order) unless it was admitted.
    return waiting_in_order(pre, decision)


# --------------------------------------------------------------------------- FIFO baseline


def schedule_fifo(snapshot: Snapshot, now: float, config: PolicyConfig | None = None) -> Decision:
    """Strict first-come-first-served baseline: no backfill, no preemption, no fair share.

    Jobs start in submit order; the first job that does not fit blocks everything behind it.
    The same hard quota caps are enforced (a job held only by its own tenant's cap does not
    block other tenants, as with one FIFO queue per tenant in a shared cohort); jobs that can
    never run are skipped with a too_large_* reason instead of blocking the queue forever.
    """
    del config
    common = PassState(snapshot)
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
    return finish_decision(order, admitted, pre, decision)
