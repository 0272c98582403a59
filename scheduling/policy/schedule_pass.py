"""Gantry's GPU scheduling policy: a pure function from a cluster snapshot to a decision.

No Django, no I/O, no clocks: the live scheduler and the trace simulator call the very same
``schedule(snapshot, now)`` once per scheduling pass.

Policy, in order of application (``SchedulePass``, whose steps are named for them):

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
7. **Guarantees before ranking** (``guarantees_before_rank``, on by default; issue 40). Before
   step 1 orders anything, the jobs that fit in their tenant's unused guarantee are
   considered, tenants with the least of their guarantee in use first: such a job starts
   on free GPUs, else reclaims borrowed ones (step 6, after ``reclaim_after_wait_s``), else
   holds the EASY reservation, so a tenant below its guarantee is never held back by
   another tenant's borrowed work. What is left (work that borrows) is ranked as in step 1,
   its attained-service level (``las_thresholds_gpu_s``, Tiresias-style) first within a
   priority; with ``las_preempt_borrowed`` (off by default: it assumes jobs resume from
   checkpoints) a borrowed job, or one of the job's own tenant, of the same priority and a
   higher level may be preempted for it, the most served first; a tenant's guarantee then
   covers its least-served running jobs, so what it borrows is its longest-served work.
8. **Explanations.** Every job left waiting gets a code, a plain-words message, its 1-based
   position among waiting jobs and, where computable, an estimated start.
"""

from __future__ import annotations

import heapq
import operator

from .data import (
    INF,
    Decision,
    JobRequest,
    PolicyConfig,
    Reservation,
    RunningJob,
    Snapshot,
    WaitReason,
)
from .messages import finish_decision, human_duration
from .placement import fits_count, fits_counts
from .quotas import PassState
from .ranking import QueueCache, Ranker

__all__ = ["QueueCache", "SchedulePass", "schedule", "schedule_fifo"]

# Why a job waits: (code, message, estimated start or None); as an answer that holds for a
# shape, message None is reserved_for_head, worded for each job (``held_message_for``).
Wait = tuple[str, str | None, float | None]


# --------------------------------------------------------------------------- Gantry policy


def schedule(snapshot: Snapshot, now: float, config: PolicyConfig | None = None,
             cache: QueueCache | None = None) -> Decision:
    """One scheduling pass of the Gantry policy (see the module docstring). ``cache``, the
    same object from pass to pass, keeps what a pass can take from the one before
    (``QueueCache``); the decision is the same without it."""
    return SchedulePass(snapshot, now, config, cache).run()


class _Victim:
    """A running job as a preemption candidate, with its estimated end (clamped to now)."""

    __slots__ = ("job", "request", "end", "gpus")

    def __init__(self, job: RunningJob, end: float) -> None:
        self.job = job
        self.request = job.request
        self.end = end
        self.gpus = job.request.total_gpus


class SchedulePass:
    """One pass of the Gantry policy over a snapshot: ``SchedulePass(snapshot, now).run()``.

    The pass walks the pending jobs in rank order (``Ranker``, which re-ranks as jobs are
    admitted) and gives each one of three outcomes: it starts on free capacity
    (``_place_on_free_capacity``), it starts on capacity taken from running jobs
    (``_preempt_for``), or it waits with a reason: its tenant's quota, or capacity as the
    head of the queue (``_wait_at_the_head``, which takes the EASY reservation) or behind
    it (``_wait_behind_the_head``).

    Most jobs of a long queue are answered without placing them: a job's shape that can
    never run is answered once per pass, and so is a (shape, priority) that found no room,
    until something changes (``state_version``, bumped on every admission and when the
    head is found). That lookup stays inline in ``run``, the one loop over up to 10,000
    jobs a pass; the steps it calls run only for jobs whose answer must be worked out.
    """

    def __init__(
        self, snapshot: Snapshot, now: float, config: PolicyConfig | None = None,
        cache: QueueCache | None = None,
    ) -> None:
        self.config = config or PolicyConfig()
        self.now = now
        self.state = PassState(snapshot, None if cache is None else cache.running)
        if self.config.rounded_up_slice:
            self.state.round_up_guarantees(snapshot.pending)
        self.cluster = self.state.cl
        self.quotas = self.state.quotas
        self.ranker = Ranker(snapshot, self.state, self.config, now, cache)
        # Pending job id -> its shape's number (kept with the cache), and shape -> number.
        self.shape_of: dict[str, int] | None = None if cache is None else cache.shape_of
        self.shapes: dict[tuple, int] = {} if cache is None else cache.shapes
        self.ranker.head_found = lambda: self.reserved_job is not None
        self.work_lost = snapshot.work_lost
        self.attained = snapshot.attained
        self.decision = Decision()
        # Every job the ranker yields that is not admitted, in yield order (= its position).
        self.waiting: dict[str, WaitReason] = self.decision.waiting
        # Jobs admitted in this pass: (request, placement, estimated end).
        self.started: list[tuple[JobRequest, dict[str, int], float]] = []

        # The EASY reservation: the first job that cannot start holds it.
        self.reserved_job: JobRequest | None = None
        # None with a reservation: unknown (depends on jobs without an estimate).
        self.reserved_start: float | None = None
        self.held_message = ""  # why a job that would delay the reserved start waits
        self.held_messages: dict[float | None, str] = {}  # ... with each estimate's words

        # Memos and the counters that invalidate them. A worker shape that found no room
        # stays without room until capacity is released (a preemption: capacity_epoch);
        # any answer about a job may change on an admission or a new reservation
        # (state_version).
        self.state_version = 0
        self.capacity_epoch = 0
        self.no_room_at_epoch: dict[tuple, int] = {}
        # (tenant, priority, constrained) -> (state_version, GPUs) of a search that failed.
        self.search_failed: dict[tuple, tuple[int, int]] = {}
        self.preemption_searches = 0

        # Preemption: which running jobs are borrowed, and the lowest priorities running.
        self.preempted: set[str] = set()
        self.victim_order: list[_Victim] | None = None  # sorted on the first search only
        # Some job is borrowed where a tenant runs more than its guarantee; which ones is
        # worked out on the first search that needs it (``borrowed``).
        self.any_borrowed = self.config.preemption and any(
            gpus > self.state.guaranteed.get(tenant, 0)
            for tenant, gpus in self.state.used_g.items()
        )
        self._borrowed: set[str] | None = None
        self.lowest_priority_of = self.state.lowest_priority
        self.lowest_running_priority = min(self.lowest_priority_of.values(), default=None)

    # -- the pass

    def run(self) -> Decision:
        """Answer every pending job in rank order; return the decision."""
        state, waiting, now = self.state, self.waiting, self.now
        new = tuple.__new__  # WaitReason(...) without the Python-level __new__ per job
        # A job's shape (tenant, workers, worker size, GPU model, priority) as a small even
        # number, kept from pass to pass with the cache; + 1 where it is constrained.
        shape_of, shapes = self.shape_of, self.shapes
        # shape + constrained -> (state_version, the answer then: code, message, ETA); None
        # for the version: a shape that can never run, answered for good; -1: one that
        # can, with no answer that holds.
        answered: dict[int, tuple] = {}
        # What only _consider changes, as locals: read again after each call.
        reserved, start, version_now = self.reserved_job, self.reserved_start, 0
        for job in self.ranker:
            # Constrained: the job must not take what the reservation needs, unless it is
            # estimated to end before the reserved start.
            if reserved is None:
                constrained = False
            else:
                estimate = job.estimated_duration
                constrained = not (estimate is not None and start is not None
                                   and now + estimate <= start)
            shape = None if shape_of is None else shape_of.get(job.id)
            if shape is None:
                shape = 2 * shapes.setdefault(
                    (job.tenant, job.workers, job.gpus_per_worker, job.cpus_per_worker,
                     job.memory_mb_per_worker, job.gpu_model, job.priority), len(shapes))
                if shape_of is not None:  # (without a cache each job comes once: not kept)
                    shape_of[job.id] = shape
            memo_key = shape + constrained
            memo = answered.get(memo_key)
            if memo is None:
                too_large = state.too_large(job)
                if too_large is not None:
                    code, message = too_large
                    answered[memo_key] = (None, code, message, None)
                    waiting[job.id] = new(WaitReason, (code, message, len(waiting) + 1, None))
                    continue
            else:
                version, code, message, estimate = memo
                if version == version_now or version is None:
                    if message is None:  # reserved_for_head: in the words of its estimate
                        message = self.held_message_for(job)
                    waiting[job.id] = new(WaitReason,
                                          (code, message, len(waiting) + 1, estimate))
                    continue
            wait = self._consider(job, constrained)
            reserved, start, version_now = (self.reserved_job, self.reserved_start,
                                            self.state_version)
            answered[memo_key] = (-1, None, None, None) if wait is None else (
                version_now, *wait)
        return self.decision

    def _consider(self, job: JobRequest, constrained: bool) -> Wait | None:
        """Start ``job`` or say why it waits. Returns the answer when it holds for every
        job of the same shape and priority until ``state_version`` changes, else None."""
        quota_block = self.state.quota_block(job)
        placement = None
        if quota_block is None:
            placement = self._place_on_free_capacity(job, constrained)
        victims: list[_Victim] = []
        if placement is None and self._preemption_could_help(job, quota_block):
            found = self._preempt_for(job, constrained)
            if found is not None:
                placement, victims = found
        if placement is not None:
            self._admit(job, placement, victims)
            return None
        if quota_block is not None:
            return self._wait(job, ("quota", quota_block, None))
        if self.reserved_job is None:
            self._wait_at_the_head(job)
            return None
        return self._wait_behind_the_head(job, constrained)

    # -- starting a job

    def _place_on_free_capacity(self, job: JobRequest, constrained: bool) -> dict[str, int] | None:
        """Best-fit placement on free capacity (and, if constrained, on capacity the
        reservation does not need); a worker shape that found no room is not tried again
        until capacity is released."""
        cluster = self.cluster
        need = job.total_gpus
        if need > cluster.free_g or (constrained and need > cluster.extra_g):
            return None
        room_key = (job.workers, job.gpus_per_worker, job.cpus_per_worker,
                    job.memory_mb_per_worker, job.gpu_model, constrained)
        if self.no_room_at_epoch.get(room_key) == self.capacity_epoch:
            return None
        placement = cluster.place(job, constrained)
        if placement is None:
            self.no_room_at_epoch[room_key] = self.capacity_epoch
        return placement

    def _admit(self, job: JobRequest, placement: dict[str, int], victims: list[_Victim]) -> None:
        job_id, tenant = job.id, job.tenant
        within_guarantee = victims and self._within_guarantee(job)
        for victim in victims:
            victim_id = victim.request.id
            self.preempted.add(victim_id)
            if victim.request.tenant == tenant:
                why = f"preempted by higher-priority job {job_id} of the same tenant"
            elif victim_id in self.borrowed and within_guarantee:
                why = (f"preempted: it ran on capacity borrowed from tenant {tenant}, "
                       f"which reclaimed it for job {job_id}")
            else:
                why = f"preempted by higher-priority job {job_id}"
            self.decision.preempt.append((victim_id, why))
        self.state.charge(job, +1)
        self.ranker.admitted(job)
        self.state_version += 1
        self.decision.admit.append((job_id, placement))
        estimate = job.estimated_duration
        self.started.append((job, placement, INF if estimate is None else self.now + estimate))

    # -- waiting

    def _wait(self, job: JobRequest, wait: Wait) -> Wait:
        """``job`` waits: its reason, and its position (the jobs answered so far + 1)."""
        waiting = self.waiting
        code, message, estimate = wait
        waiting[job.id] = WaitReason(code, message, len(waiting) + 1, estimate)
        return wait

    def _wait_at_the_head(self, job: JobRequest) -> None:
        """The first job that cannot start: with backfill it gets the reservation (if it
        can ever fit); without, every job after it waits."""
        if self.config.backfill:
            self._reserve(job)
        code, message = self.state.capacity_message(job)
        holds_reservation = self.reserved_job is job
        start = self.reserved_start if holds_reservation else None
        if holds_reservation and start is not None:
            message += f"; next in line, reserved start in ~{human_duration(start - self.now)}"
        elif holds_reservation:
            message += "; next in line once jobs without a runtime estimate finish"
        self._wait(job, (code, message, start))
        if not self.config.backfill:
            self._block_everything_behind(job)
        self.state_version += 1

    def _block_everything_behind(self, job: JobRequest) -> None:
        """A plain priority queue without backfill: no job after the head may start."""
        self.reserved_job = job
        self.held_message = (f"behind job {job.id}, which must start first "
                             "(backfill is disabled)")
        self.held_messages.clear()
        cluster = self.cluster
        n = len(cluster.fg)
        cluster.eg, cluster.ec, cluster.em = [0] * n, [0.0] * n, [0] * n
        cluster.extra_g = 0
        self.reserved_start = None

    def _wait_behind_the_head(self, job: JobRequest, constrained: bool) -> Wait | None:
        """A reservation exists: say whether the job waits for it or for capacity."""
        cluster = self.cluster
        if constrained and job.total_gpus <= cluster.free_g and cluster.find(
            job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker, job.gpu_model,
            False,
        ) >= 0:
            self._wait(job, ("reserved_for_head", self.held_message_for(job), None))
            # The same for every job of this shape until the state changes, but for the
            # words about its own estimate (the message None: ``run`` asks
            # ``held_message_for``); unless a preemption search might start a later one.
            return None if self._preemption_may_help_shape(job) else (
                "reserved_for_head", None, None)
        code, message = self.state.capacity_message(job)
        return self._wait(job, (code, message, None))

    def held_message_for(self, job: JobRequest) -> str:
        """Why a job that fits now but would delay the reserved start waits (its estimate
        in words, each estimate worded once per pass)."""
        estimate = job.estimated_duration
        message = self.held_messages.get(estimate)
        if message is None:
            why = ("it has no runtime estimate" if estimate is None
                   else f"its estimated {human_duration(estimate)} would run past that start")
            message = self.held_messages[estimate] = f"{self.held_message}; {why}"
        return message

    # -- the EASY reservation

    def _estimated_end(self, job: RunningJob) -> float:
        """When a running job should end by its estimate (never without one; now if over)."""
        estimate = job.request.estimated_duration
        return INF if estimate is None else max(job.start_time + estimate, self.now)

    def _reserve(self, job: JobRequest) -> None:
        """Reserve the earliest start at which ``job`` fits, as running jobs (and those
        admitted in this pass) end by their estimates, and where: best fit on the free
        capacity then. Capacity the reservation does not need stays usable (``eg/ec/em``).
        No reservation if the job cannot fit even when everything has ended."""
        found = self._earliest_fit(job)
        if found is None:
            return
        start, free_g, free_c, free_m, fits = found
        g, c, m = job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker
        cluster = self.cluster
        best_fit = sorted((i for i in range(len(free_g)) if fits[i] > 0),
                          key=lambda i: (free_g[i], free_c[i], i))
        left = job.workers
        placement: dict[str, int] = {}
        for i in best_fit:
            k = min(fits[i], left)
            placement[cluster.names[i]] = k
            free_g[i] -= k * g
            free_c[i] -= k * c
            free_m[i] -= k * m
            left -= k
            if left == 0:
                break
        cluster.eg, cluster.ec, cluster.em = free_g, free_c, free_m
        cluster.extra_g = sum(x for x in free_g if x > 0)
        self.reserved_job, self.reserved_start = job, start
        self.decision.reservation = Reservation(job.id, start, placement)
        when = (f"reserved start in ~{human_duration(start - self.now)}" if start is not None
                else "start depends on jobs without a runtime estimate")
        self.held_message = f"held for the {job.total_gpus}-GPU job ahead of it ({when})"
        self.held_messages.clear()

    def _earliest_fit(self, job: JobRequest):
        """(start, free GPUs, CPUs and memory per node then, workers that fit per node), or
        None if the job never fits. ``start`` is None where it depends on jobs without an
        estimate."""
        g, c, m = job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker
        cluster = self.cluster
        n = len(cluster.fg)
        free_g, free_c, free_m = list(cluster.fg), list(cluster.fc), list(cluster.fm)
        fits = fits_counts(free_g, free_c, free_m, g, c, m)
        if job.gpu_model:
            right_model = [model == job.gpu_model for model in cluster.model]
            fits = list(map(operator.mul, fits, right_model))  # (0 on another model)
        else:  # every node
            right_model = [True] * n
        total = sum(fits)
        if total >= job.workers:
            return self.now, free_g, free_c, free_m, fits
        now, preempted = self.now, self.preempted
        ends = [
            (INF if (estimate := r.estimated_duration) is None
             else now if now > (end := rj.start_time + estimate) else end,
             r.id, r, rj.placement)
            for rj in self.state.running
            if (r := rj.request).id not in preempted
        ]  # each as _estimated_end (max(end, now)), inline: one entry per running job
        ends.extend((end, r.id, r, placement) for r, placement, end in self.started)
        # In (end, id) order, taken only as far as needed: ids are unique, so comparisons
        # stop there and the heap gives the sorted order.
        heapq.heapify(ends)
        while ends:
            end, _, ending, placement = heapq.heappop(ends)
            ends_g, ends_c, ends_m = (ending.gpus_per_worker, ending.cpus_per_worker,
                                      ending.memory_mb_per_worker)
            for name, workers in placement.items():
                i = cluster.index.get(name)
                if i is None:
                    continue
                free_g[i] += workers * ends_g
                free_c[i] += workers * ends_c
                free_m[i] += workers * ends_m
                if right_model[i]:
                    k = fits_count(free_g[i], free_c[i], free_m[i], g, c, m)
                    total += k - fits[i]
                    fits[i] = k
            if total >= job.workers:
                return (None if end == INF else end), free_g, free_c, free_m, fits
        return None  # cannot fit even when everything ends (nodes missing)

    # -- preemption

    @property
    def borrowed(self) -> set[str]:
        """The running jobs other tenants may reclaim (``_borrowed_jobs``), once per pass."""
        if self._borrowed is None:
            self._borrowed = self._borrowed_jobs() if self.any_borrowed else set()
        return self._borrowed

    def _borrowed_jobs(self) -> set[str]:
        """Running jobs beyond their tenant's guarantee, which fills in (priority desc,
        start time asc) order: the ones other tenants may reclaim. With
        ``las_preempt_borrowed`` it fills by (priority desc, attained-service level asc,
        start time asc), as the LAS reference's levels-as-priorities do: a tenant's
        long-running work is what it borrows, so fresh jobs of others reach it (on the
        Philly windows this took the p95 wait from 0.55 to 0.50 of EASY's)."""
        by_tenant: dict[str, list[tuple]] = {}
        las, now = self.config.las_preempt_borrowed, self.now
        for rj in self.state.running:
            r = rj.request
            gpus = r.workers * r.gpus_per_worker
            # Plain tuples (ids are unique, so comparisons stop there). With LAS preemption
            # the least-served jobs fill the guarantee first: the most-served are borrowed.
            level = self._las_level(r.id, gpus * (now - rj.start_time)) if las else 0
            key = (-r.priority, level, rj.start_time, r.id, gpus)
            jobs = by_tenant.get(r.tenant)
            if jobs is None:
                by_tenant[r.tenant] = [key]
            else:
                jobs.append(key)
        borrowed: set[str] = set()
        for tenant, jobs in by_tenant.items():
            guaranteed = self.state.guaranteed.get(tenant, 0)
            if sum(k[4] for k in jobs) <= guaranteed:
                continue  # all within the guarantee: nothing borrowed, no sort needed
            jobs.sort()
            held = 0
            for _, _, _, job_id, gpus in jobs:
                held += gpus
                if held > guaranteed:
                    borrowed.add(job_id)
        return borrowed

    def _preemption_could_help(self, job: JobRequest, quota_block: str | None) -> bool:
        """A cheap test before a search: is there any job ``job`` may preempt?"""
        cfg = self.config
        if not cfg.preemption or self.preemption_searches >= cfg.max_preemption_attempts:
            return False
        if quota_block is not None:  # only its own tenant's lower-priority jobs can help
            return job.priority > self.lowest_priority_of.get(job.tenant, job.priority)
        # Borrowed jobs of others are fair game at equal priority only once the job has
        # waited reclaim_after_wait_s (_candidates' rule): before that (or with reclaim off)
        # the search cannot succeed, and it costs a walk over every running job.
        return bool(
            (self.any_borrowed and (self.now - job.submit_time >= cfg.reclaim_after_wait_s
                                or cfg.las_preempt_borrowed))
            or (self.lowest_running_priority is not None
                and job.priority > self.lowest_running_priority)
        )

    def _preemption_may_help_shape(self, job: JobRequest) -> bool:
        """``_preemption_could_help`` (within quota) for any job of ``job``'s shape and
        priority, however long it has waited, in the rest of this pass."""
        cfg = self.config
        if not cfg.preemption or self.preemption_searches >= cfg.max_preemption_attempts:
            return False  # (the searches only grow)
        return bool(
            (self.any_borrowed and (cfg.reclaim_after_wait_s < INF or cfg.las_preempt_borrowed))
            or (self.lowest_running_priority is not None
                and job.priority > self.lowest_running_priority)
        )

    def _preempt_for(self, job: JobRequest, constrained: bool):
        """(placement, victims) for ``job`` on capacity taken from running jobs, or None.
        A search that failed is not repeated for the same tenant, priority and constraint
        until the state changes, unless this job needs fewer GPUs."""
        failed_key = (job.tenant, job.priority, constrained)
        failed = self.search_failed.get(failed_key)
        if failed is not None and failed[0] == self.state_version and job.total_gpus >= failed[1]:
            return None
        self.preemption_searches += 1
        candidates = self._candidates(job)
        found = self._choose_victims(job, candidates, constrained) if candidates else None
        if found is None:
            self.search_failed[failed_key] = (self.state_version, job.total_gpus)
        else:
            self.capacity_epoch += 1
        return found

    def _lost_work(self, victim: _Victim) -> float:
        """GPU-seconds the victim loses: since its last checkpoint, else since its start."""
        return self.work_lost.get(victim.request.id,
                                  victim.gpus * (self.now - victim.job.start_time))

    def _las_level(self, job_id: str, default: float) -> int:
        """The attained-service level of a job (``PolicyConfig.las_thresholds_gpu_s``)."""
        got = self.attained.get(job_id, default)
        return sum(1 for th in self.config.las_thresholds_gpu_s if got >= th)

    def _victims_in_order(self) -> list[_Victim]:
        """Running jobs in the order they are taken: lowest priority first, then least work
        lost (so the jobs that have run longest are the last to lose their progress);
        checkpoint-aware: least work lost first (GPU-seconds since the last complete
        checkpoint), then priority. With ``las_preempt_borrowed``: lowest priority first,
        then the highest attained-service level (the most served, as LAS takes them), then
        least work lost: on the synthetic trace at 0.7 of the cluster this took rho <= 1
        from 89% to 96% of the tenant-windows and the p95 wait below LAS's."""
        if self.victim_order is None:
            lost = self._lost_work
            victims = [_Victim(rj, self._estimated_end(rj)) for rj in self.state.running]
            now, level = self.now, self._las_level
            self.victim_order = sorted(
                victims,
                key=(lambda v: (v.request.priority, -level(
                    v.request.id, v.gpus * (now - v.job.start_time)), lost(v), v.request.id))
                if self.config.las_preempt_borrowed  # the most served first, within a priority
                else (lambda v: (lost(v), v.request.priority, v.request.id))
                if self.config.checkpoint_aware
                else (lambda v: (v.request.priority, lost(v), v.request.id)),
            )
        return self.victim_order

    def _within_guarantee(self, job: JobRequest) -> bool:
        """Does ``job`` fit in its tenant's guarantee (``PassState.guaranteed``) beside what
        the tenant runs?"""
        return (self.state.used_g.get(job.tenant, 0) + job.total_gpus
                <= self.state.guaranteed.get(job.tenant, 0))

    def _candidates(self, job: JobRequest) -> list[_Victim] | None:
        """The running jobs ``job`` may preempt, in victim order; None if even all of them
        would not free enough GPUs."""
        cfg, now = self.config, self.now
        within_guarantee = self._within_guarantee(job)
        # Reclaiming borrowed capacity waits until the claimant has queued a while: most
        # borrowed jobs end by themselves in that time, and ending them early wastes work.
        waited = now - job.submit_time
        may_reclaim = within_guarantee and waited >= cfg.reclaim_after_wait_s
        # ... and only victims whose lost work (GPU-seconds run) is at most what the claimant
        # has lost by waiting (times reclaim_work_ratio): the longer it waits, the more it may
        # take back, but it never throws away more than it gains.
        ratio = cfg.reclaim_work_ratio
        max_loss = INF if ratio == INF else ratio * job.total_gpus * max(waited, 0.0)
        # Attained service (LAS): a job may take a borrowed job, or one of its own tenant's,
        # of the same priority that has received more service (a higher level).
        las_level = self._las_level(job.id, 0.0) if cfg.las_preempt_borrowed else None
        candidates = []
        available = self.cluster.free_g
        for victim in self._victims_in_order():
            victim_id = victim.request.id
            if victim_id in self.preempted or not victim.job.preemptible:
                continue
            if now - victim.job.start_time < cfg.min_runtime_before_preempt_s:
                continue
            more_served = (
                las_level is not None
                and victim.request.priority == job.priority
                and self._las_level(victim_id, victim.gpus * (now - victim.job.start_time))
                > las_level
            )
            if victim.request.tenant == job.tenant:
                allowed = victim.request.priority < job.priority or more_served
            elif victim_id in self.borrowed:
                allowed = victim.request.priority < job.priority or (
                    may_reclaim
                    and self._lost_work(victim) <= max_loss
                    and victim.end - now >= cfg.reclaim_min_remaining_s
                ) or more_served
            else:
                allowed = False
            if allowed:
                candidates.append(victim)
                available += victim.gpus
        if available < job.total_gpus or not candidates:
            return None
        return candidates

    def _choose_victims(self, job: JobRequest, candidates: list[_Victim], constrained: bool):
        """Release candidates in order until ``job`` fits, then give back those it turns
        out not to need (all but the last, latest first). None if it never fits."""
        chosen: list[_Victim] = []
        placement = None
        for victim in candidates:
            chosen.append(victim)
            self._release(victim, +1)
            placement = self._place_after_release(job, constrained)
            if placement is not None:
                break
        if placement is None:
            for victim in chosen:
                self._release(victim, -1)
            return None
        for victim in list(reversed(chosen[:-1])):
            self.cluster.unplace(job, placement, constrained)
            self._release(victim, -1)
            without = self._place_after_release(job, constrained)
            if without is not None:
                placement = without
                chosen.remove(victim)
            else:
                self._release(victim, +1)
                placement = self._place_after_release(job, constrained)
                assert placement is not None
        return placement, chosen

    def _place_after_release(self, job: JobRequest, constrained: bool) -> dict[str, int] | None:
        if self.cluster.free_g < job.total_gpus or self.state.quota_block(job) is not None:
            return None
        return self.cluster.place(job, constrained)

    def _release(self, victim: _Victim, sign: int) -> None:
        """Give a victim's resources back to the pass (sign +1), or take them again (-1);
        to the reservation's spare capacity too where the victim would have run past the
        reserved start."""
        r = victim.request
        g, c, m = r.gpus_per_worker, r.cpus_per_worker, r.memory_mb_per_worker
        spare = self.reserved_job is not None and (
            self.reserved_start is None or victim.end > self.reserved_start
        )
        cluster = self.cluster
        for name, workers in victim.job.placement.items():
            i = cluster.index.get(name)
            if i is not None:
                if sign > 0:
                    cluster.give(i, workers * g, workers * c, workers * m, spare)
                else:
                    cluster.take(i, workers * g, workers * c, workers * m, spare)
        self.state.charge(r, -sign)


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
