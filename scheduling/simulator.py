"""Discrete-event trace simulator driving the very same ``schedule()`` as the live system.

Model (documented choices):

* **Events.** Arrivals and completions. All events at the same timestamp are applied, then the
  policy runs once (one "scheduling pass"). With ``tick_s > 0`` events are coalesced into
  ticks: the pass for events in ``(k-1)*tick, k*tick]`` runs at ``k*tick`` (resources of jobs
  that ended inside the tick are released at the tick; their JCT uses the true end).
* **Jobs.** A trace job of ``n`` GPUs becomes a gang: one worker if it fits on a node,
  otherwise ``n / d`` workers of ``d`` GPUs where ``d`` is the largest divisor of ``n`` that
  fits on the largest node. CPUs and memory per worker are proportional to GPUs (the node's
  CPU and memory per GPU).
* **Estimates** (``estimate=``). ``"realistic"`` (the default): what live Gantry would know, the
  job's timeout: the trace's ``requested_time`` where it has one, else the user-estimate model
  below (``scheduling.traces.user_estimate``, applied by ``to_requests``). ``"user"``: always the model. ``"oracle"``: the true duration (flatters any policy that
  uses estimates; only on request, and labelled in the results). ``"none"``: no estimates.
  *User-estimate model* (seeded per job): the user guesses ``duration * F`` with
  ``ln F ~ Normal(ln 12, 2.5)`` (about 16% of guesses under the truth), then picks the
  smallest standard limit at or above the guess from 15 min, 30 min, 1, 2, 4, 8, 12, 24, 48,
  72 h and 7 d (7 d caps it). Fitted to the median of requested over true runtime in traces
  that have both (16x): on the Philly trace the model gives a median of about 17x and a p90
  of about 240x (real traces reach a p90 above 1,000x on jobs of seconds; the 15 min floor
  and the 7 d cap keep the model below that), and about 7.5% of jobs run into their limit.
  A limit below the true duration kills the job *at the limit* (it runs for the limit and
  counts as ``killed_at_limit``), as live Gantry's timeout would. Requested times from a
  trace kill the same way.
* **Preemption** is a requeue: the job loses its progress (restarts from zero, no checkpoint
  model), keeps its original submit time, and its lost GPU-seconds are reported. With
  ``resume=True`` (the ``"las"`` reference's default; bench/simulate.py's ``fair_ceiling``
  sets it too) a preempted job keeps its progress, as with perfect checkpoints.
* **Fair-share history** is the GPU usage per tenant and the GPUs it was entitled to (its
  weighted max-min share of the demand, ``policy.entitlement``), both with exponential decay
  (time constant ``usage_tau_s``), passed to the policy as decayed GPU-seconds.
* **Quota / capacity check** is independent of the policy: after every pass the simulator
  recomputes per-node and per-tenant usage from the placements and counts violations of node
  capacity, of guaranteed + borrow limit GPUs, and of max_cpus / max_memory_mb / max_jobs.

Policies: ``"gantry"`` (``schedule``), ``"fifo"`` (strict FIFO, ``schedule_fifo``), ``"easy"``
(FIFO + EASY backfill: ``schedule`` with fair share and preemption off, so jobs keep submit
order and a job only jumps the queue where it cannot delay the head's reservation), ``"las"``
(a size-blind Tiresias-style reference: discretised least-attained-service, two thresholds
``LAS_THRESHOLDS_GPU_S``, jobs with less attained GPU time preempt those with more within the
same quota rules, no runtime estimates used, perfect checkpoints), or a callable.

Metrics: JCT = completion - submit; wait = total time spent pending (all queueing spells);
``wait_incl_lost`` adds the run time of attempts lost to preemption (the job's real delay);
GPU utilisation = busy GPU-seconds / (cluster GPUs x span), reported over the *steady* part of
the window (from the 10th to the 90th percentile arrival: no warm-up, no drain tail) beside the
whole span; fairness = per tenant, GPU-seconds received vs its weighted max-min fair share
(water-filling of the cluster's GPUs over tenants' instantaneous demand capped by their quota
limit, weights = guaranteed GPUs x weight), integrated over time; Jain's index over tenants
with demand of the ratio received / fair.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from .policy.data import Decision, JobRequest, Node, PolicyConfig, Quota, RunningJob, Snapshot
from .policy.entitlement import entitled_now
from .policy.schedule_pass import QueueCache, schedule, schedule_fifo
from .sim_metrics import (
    check_state,
    jain_index,
    percentile,
    sharing_ratios,
    slice_gpus,
    slice_nodes,
    stats,
    window_fairness,
)
from .traces import TraceJob, gang_split, to_requests

__all__ = [
    "EASY_CONFIG",
    "LAS_THRESHOLDS_GPU_S",
    "SimulationError",
    "las_level",
    "per_job_rows",
    "private_slices",
    "run_simulation",
]

PolicyFn = Callable[[Snapshot, float], Decision]


class SimulationError(RuntimeError):
    """The policy returned an impossible decision (unknown job, unknown node...)."""


LAS_THRESHOLDS_GPU_S = (3600.0, 36_000.0)  # 1 and 10 GPU-hours


# --------------------------------------------------------------------------- simulator


@dataclass(slots=True)
class _Job:
    req: JobRequest
    duration: float  # run time: the trace duration, cut at the limit where killed
    queued_since: float
    killed: bool = False
    wait: float = 0.0
    first_start: float = -1.0
    start: float = -1.0
    finish: float = -1.0
    epoch: int = 0
    preemptions: int = 0
    lost_s: float = 0.0  # wall time of attempts lost to preemption
    lost_gpu_s: float = 0.0
    progress: float = 0.0  # seconds of run kept across preemptions (resume only)
    fits_guarantee: bool = False  # fit in its tenant's unused guarantee at submit


def las_level(attained_gpu_s: float) -> int:
    """Tiresias-style discretised LAS queue: 0 below the first threshold, then 1, 2..."""
    return sum(1 for th in LAS_THRESHOLDS_GPU_S if attained_gpu_s >= th)


def _las_policy(jobs: Mapping[str, _Job]) -> PolicyFn:
    """Size-blind reference: rank by (priority, LAS queue, submit time), no estimates;
    a job in a lower queue may preempt one in a higher queue under the usual quota rules."""
    cfg = PolicyConfig(fair_share=False, backfill=True, preemption=True)
    scale = len(LAS_THRESHOLDS_GPU_S) + 1

    def decide(snap: Snapshot, now: float) -> Decision:
        def prio(r: JobRequest, attained_s: float) -> int:
            return r.priority * scale - las_level(attained_s * r.total_gpus)

        pend = [
            replace(r, priority=prio(r, jobs[r.id].progress), estimated_duration=None)
            for r in snap.pending
        ]
        run = [
            RunningJob(
                replace(
                    rj.request,
                    priority=prio(rj.request, jobs[rj.request.id].progress + now - rj.start_time),
                    estimated_duration=None,
                ),
                rj.placement,
                rj.start_time,
                rj.borrowed,
            )
            for rj in snap.running
        ]
        return schedule(Snapshot(snap.nodes, snap.quotas, run, pend, snap.usage_history,
                                 entitled_history=snap.entitled_history), now, cfg)

    decide.__name__ = "las"
    return decide


EASY_CONFIG = PolicyConfig(fair_share=False, backfill=True, preemption=False)


def _resolve_policy(policy: str | PolicyFn, config: PolicyConfig | None, jobs) -> PolicyFn:
    if callable(policy):
        return policy
    if policy == "gantry":
        cache = QueueCache()  # one per simulation: its passes follow one another
        return lambda snap, now: schedule(snap, now, config, cache)
    if policy == "fifo":
        return schedule_fifo
    if policy == "easy":
        return lambda snap, now: schedule(snap, now, EASY_CONFIG)
    if policy == "las":
        return _las_policy(jobs)
    raise ValueError(
        f"unknown policy {policy!r}: use 'gantry', 'fifo', 'easy', 'las' or a callable"
    )


def run_simulation(
    trace_jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    quotas: Mapping[str, Quota],
    policy: str | PolicyFn = "gantry",
    *,
    estimate: str = "realistic",
    tick_s: float = 0.0,
    usage_tau_s: float = 86_400.0,
    config: PolicyConfig | None = None,
    seed: int = 0,
    max_passes: int | None = None,
    resume: bool | None = None,
    keep_jobs: bool | None = None,
    private: Mapping[str, dict] | bool = False,
) -> dict:
    """Replay ``trace_jobs`` on ``nodes`` with ``quotas`` under ``policy``; return metrics.

    ``policy`` is ``"gantry"``, ``"fifo"``, ``"easy"``, ``"las"`` (see the module docstring) or
    any callable ``(snapshot, now) -> Decision``. The result is a JSON-serialisable dict: job
    counts (``completed``, ``unschedulable`` = too_large_*, ``stuck`` = left waiting with no
    event that could change that; must be 0, ``killed_at_limit``), ``avg/p50/p95`` of JCT, wait
    and wait including run time lost to preemption, ``gpu_utilization_steady`` (10th to 90th
    percentile arrival) beside ``gpu_utilization`` (first submit -> last completion),
    ``jain_index`` (and ``jain_index_capped``, over min(received / entitled, 1)), per-tenant
    ``tenants`` figures, ``preemptions`` and ``lost_gpu_hours``, ``quota_violations`` and
    ``capacity_violations`` (independent check after every pass; must be 0), scheduler
    timing, and ``per_job`` rows (``keep_jobs``; by default only for traces of at most 2,000
    jobs). ``resume``: preempted jobs keep their progress (default: only for
    ``"las"``). ``private``: the sharing incentive (``sim_metrics``): True runs each tenant
    alone on its private slice here, or pass ``private_slices``'s result (it does not depend
    on the policy, so a bench replaying several policies runs it once); the result then has
    ``sharing`` (rho per tenant) and ``fairness`` (``window_fairness``). Raises
    ``SimulationError`` if the policy admits or preempts jobs that do not exist.
    """
    wall0 = time.perf_counter()
    if config is None and policy == "gantry":
        config = PolicyConfig(usage_window_s=usage_tau_s)
    if resume is None:
        resume = policy == "las"
    reqs = to_requests(trace_jobs, nodes, estimate=estimate, seed=seed)
    reqs.sort(key=lambda x: (x[0].submit_time, x[0].id))
    true_dur = {str(tj.job_id): tj.duration for tj in trace_jobs}
    jobs: dict[str, _Job] = {}
    decide = _resolve_policy(policy, config, jobs)
    replay = _Replay(reqs, nodes, quotas, decide, jobs, true_dur, usage_tau_s, resume)
    replay.run(tick_s, max_passes)
    result = {
        "policy": policy if isinstance(policy, str) else getattr(policy, "__name__", "custom"),
        "estimate": estimate,
        "estimate_note": ESTIMATE_NOTES[estimate],
    }
    result.update(replay.summary())
    result["wall_s"] = round(time.perf_counter() - wall0, 2)
    result["tenants"] = replay.tenant_rows()
    if private is not False:
        if private is True:
            private = private_slices(trace_jobs, nodes, quotas, estimate=estimate, seed=seed)
        shared: dict[str, dict[str, float]] = {}
        for jid, j in jobs.items():
            if j.finish >= 0:
                shared.setdefault(j.req.tenant, {})[jid] = j.finish - j.req.submit_time
        ratios = sharing_ratios(shared, {t: p["jct"] for t, p in private.items()},
                                {t: p["slice_gpus"] for t, p in private.items()})
        fit_waits = [j.first_start - j.req.submit_time for j in jobs.values()
                     if j.fits_guarantee and j.first_start >= 0]
        result["sharing"] = ratios
        result["fairness"] = window_fairness(ratios, fit_waits)
    if keep_jobs is None:
        keep_jobs = replay.n <= 2000
    result["per_job"] = per_job_rows(jobs) if keep_jobs else None
    return result


def private_slices(
    trace_jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    quotas: Mapping[str, Quota],
    *,
    estimate: str = "realistic",
    seed: int = 0,
) -> dict[str, dict]:
    """Each tenant's jobs replayed alone under EASY on a private cluster of its guaranteed
    GPUs (``sim_metrics.slice_gpus``): {tenant: {"slice_gpus", "jct": {job id: JCT}}}.
    The same estimates (and kills at the limit) as the shared run: they are seeded per job.
    A tenant guaranteed nothing gets no slice (and no JCTs)."""
    shape = max(nodes, key=lambda n: (n.gpus, n.cpus, n.memory_mb))
    by_tenant: dict[str, list[TraceJob]] = {}
    for tj in trace_jobs:
        by_tenant.setdefault(tj.tenant, []).append(tj)
    out: dict[str, dict] = {}
    for tenant, tjs in sorted(by_tenant.items()):
        q = quotas.get(tenant)
        gangs = [gang_split(tj.num_gpus, shape.gpus) for tj in tjs if tj.num_gpus > 0]
        gpus = slice_gpus(q.guaranteed_gpus if q else 0, gangs, shape)
        jct: dict[str, float] = {}
        if gpus > 0:
            res = run_simulation(tjs, slice_nodes(gpus, shape), {tenant: Quota(tenant, gpus)},
                                 "easy", estimate=estimate, seed=seed, keep_jobs=True)
            jct = {jid: row["finish"] - row["submit"] for jid, row in res["per_job"].items()
                   if row["finish"] >= 0}
        out[tenant] = {"slice_gpus": gpus, "jct": jct}
    return out


ESTIMATE_NOTES = {
    "realistic": "requested time from the trace, else the user-estimate model",
    "user": "user-estimate model",
    "oracle": "ORACLE: true durations (optimistic, not what live Gantry knows)",
    "none": "no estimates",
}


class _Replay:
    """One replay's state: the clock, the queues, the event heap and the tallies.

    The event loop (``run``) is a sequence of named steps, each a method a test can drive:
    ``next_event_time``, ``advance`` (integrate usage, fair share and busy GPUs up to a
    time), ``complete``, ``arrive``, ``schedule_pass`` and ``apply`` (preemptions,
    admissions, unrunnable jobs, the independent quota check)."""

    def __init__(
        self,
        reqs: list[tuple[JobRequest, float]],
        nodes: Sequence[Node],
        quotas: Mapping[str, Quota],
        decide: PolicyFn,
        jobs: dict[str, _Job],
        true_dur: Mapping[str, float],
        usage_tau_s: float,
        resume: bool,
    ) -> None:
        self.reqs, self.nodes, self.quotas, self.decide = reqs, nodes, quotas, decide
        self.jobs, self.true_dur, self.usage_tau_s, self.resume = jobs, true_dur, usage_tau_s, resume
        self.node_names = {n.name for n in nodes}
        self.cluster_gpus = sum(n.gpus for n in nodes)
        self.pending: dict[str, JobRequest] = {}
        self.running: dict[str, RunningJob] = {}
        self.heap: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.usage: dict[str, float] = {}
        self.run_g: dict[str, int] = {}  # GPUs running per tenant
        self.demand_g: dict[str, int] = {}  # GPUs pending+running per tenant (runnable only)
        self.recv: dict[str, float] = {}
        self.fair: dict[str, float] = {}
        self.entitled: dict[str, float] = {}  # decayed entitled GPU-seconds (as usage)
        self.unrunnable: set[str] = set()
        self.busy_gpu_s = 0.0
        self.busy_until_last_arrival = 0.0
        self.busy_steady = 0.0
        self.quota_viol = self.cap_viol = 0
        self.preemptions = 0
        self.passes = 0
        self.sched_time = 0.0
        self.sched_max = 0.0
        self.stuck: list[str] = []
        n = self.n = len(reqs)
        self.first_t = reqs[0][0].submit_time if reqs else 0.0
        self.last_arrival = reqs[-1][0].submit_time if reqs else 0.0
        self.steady0 = reqs[int(0.1 * (n - 1))][0].submit_time if reqs else 0.0
        self.steady1 = reqs[int(0.9 * (n - 1))][0].submit_time if reqs else 0.0
        self.t = self.first_t
        self.ai = 0

    def run(self, tick_s: float, max_passes: int | None) -> None:
        while self.ai < self.n or self.heap:
            self.advance(self.next_event_time(tick_s))
            self.complete()
            self.arrive()
            if not self.pending:
                continue
            self.apply(self.schedule_pass())
            if max_passes is not None and self.passes >= max_passes:
                break
            if self.ai >= self.n and not self.heap and self.pending:
                # Nothing left that could change the state: whatever still waits is stuck.
                self.stuck = [jid for jid in self.pending if jid not in self.unrunnable]
                break

    def next_event_time(self, tick_s: float) -> float:
        nxt = math.inf
        if self.ai < self.n:
            nxt = self.reqs[self.ai][0].submit_time
        if self.heap:
            nxt = min(nxt, self.heap[0][0])
        if tick_s > 0:
            nxt = math.ceil(nxt / tick_s) * tick_s
        return nxt

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, integrating busy GPUs, decayed usage and fair shares."""
        t = self.t
        dt = to - t
        if dt <= 0:
            return
        run_g, usage, usage_tau_s = self.run_g, self.usage, self.usage_tau_s
        busy = sum(run_g.values())
        self.busy_gpu_s += busy * dt
        if t < self.last_arrival:
            self.busy_until_last_arrival += busy * min(dt, self.last_arrival - t)
        overlap = min(to, self.steady1) - max(t, self.steady0)
        if overlap > 0:
            self.busy_steady += busy * overlap
        decay = math.exp(-dt / usage_tau_s)
        for tenant in set(usage) | set(run_g):
            g = run_g.get(tenant, 0)
            # exact integral of g over dt under exponential decay
            usage[tenant] = usage.get(tenant, 0.0) * decay + g * usage_tau_s * (1 - decay)
        # Entitled GPUs now (weighted max-min over demand): integrated for Jain's index, and
        # decayed like usage for the policy's fair share (Snapshot.entitled_history).
        alloc = entitled_now(self.cluster_gpus, self.demand_g, self.quotas)
        fair, entitled = self.fair, self.entitled
        for k in set(entitled) | set(alloc):
            a = alloc.get(k, 0.0)
            fair[k] = fair.get(k, 0.0) + a * dt
            entitled[k] = entitled.get(k, 0.0) * decay + a * usage_tau_s * (1 - decay)
        recv = self.recv
        for k, g in run_g.items():
            if g:
                recv[k] = recv.get(k, 0.0) + g * dt
        self.t = to

    def complete(self) -> None:
        """Jobs whose (current attempt's) end is due by now finish."""
        heap, jobs, running = self.heap, self.jobs, self.running
        while heap and heap[0][0] <= self.t:
            end, _, jid, ep = heapq.heappop(heap)
            j = jobs[jid]
            if ep != j.epoch or jid not in running:
                continue  # stale entry of a preempted attempt
            del running[jid]
            j.finish = end
            r = j.req
            self.run_g[r.tenant] -= r.total_gpus
            self.demand_g[r.tenant] -= r.total_gpus

    def arrive(self) -> None:
        """Jobs submitted by now join the queue."""
        reqs, jobs, true_dur = self.reqs, self.jobs, self.true_dur
        while self.ai < self.n and reqs[self.ai][0].submit_time <= self.t:
            r, dur = reqs[self.ai]
            self.ai += 1
            if r.id in jobs:
                raise SimulationError(f"duplicate job id {r.id!r} in the trace")
            q = self.quotas.get(r.tenant)
            asked = self.demand_g.get(r.tenant, 0)  # GPUs it runs and has queued
            jobs[r.id] = _Job(r, dur, queued_since=r.submit_time,
                              killed=dur < true_dur.get(r.id, dur),
                              fits_guarantee=q is not None and r.total_gpus > 0
                              and asked + r.total_gpus <= q.guaranteed_gpus)
            self.pending[r.id] = r
            self.demand_g[r.tenant] = asked + r.total_gpus

    def schedule_pass(self) -> Decision:
        """One call of the policy on a snapshot of now, timed."""
        snap = Snapshot(self.nodes, self.quotas, list(self.running.values()),
                        list(self.pending.values()), self.usage,
                        entitled_history=self.entitled, attained=self.attained())
        s0 = time.perf_counter()
        dec = self.decide(snap, self.t)
        el = time.perf_counter() - s0
        self.sched_time += el
        self.sched_max = max(self.sched_max, el)
        self.passes += 1
        return dec

    def attained(self) -> dict[str, float]:
        """GPU-seconds of service each job keeps (the progress a preempted job resumes from,
        plus the current run): the policy's attained-service levels."""
        jobs, t = self.jobs, self.t
        out = {jid: jobs[jid].progress * r.total_gpus
               for jid, r in self.pending.items() if jobs[jid].progress > 0}
        for jid, rj in self.running.items():
            out[jid] = (jobs[jid].progress + t - rj.start_time) * rj.request.total_gpus
        return out

    def apply(self, dec: Decision) -> None:
        self.preempt(dec.preempt)
        self.admit(dec.admit)
        for jid, wr in dec.waiting.items():
            if wr.code.startswith("too_large") and jid not in self.unrunnable:
                self.unrunnable.add(jid)
                self.demand_g[self.jobs[jid].req.tenant] -= self.jobs[jid].req.total_gpus
        qv, cv = check_state(self.nodes, self.quotas, list(self.running.values()))
        self.quota_viol += qv
        self.cap_viol += cv

    def preempt(self, preempt: Sequence[tuple[str, str]]) -> None:
        """Preempted jobs go back to the queue: their run is lost (or kept, with resume)."""
        t = self.t
        for jid, _why in preempt:
            rj = self.running.pop(jid, None)
            if rj is None:
                raise SimulationError(f"policy preempted {jid!r}, which is not running")
            j = self.jobs[jid]
            j.epoch += 1
            j.preemptions += 1
            self.preemptions += 1
            ran = t - rj.start_time
            if self.resume:
                j.progress += ran
            else:
                j.lost_s += ran
                j.lost_gpu_s += ran * rj.request.total_gpus
            j.queued_since = t
            self.pending[jid] = j.req
            self.run_g[j.req.tenant] -= j.req.total_gpus

    def admit(self, admit: Sequence[tuple[str, dict[str, int]]]) -> None:
        """Admitted jobs start now; their end goes on the event heap."""
        t = self.t
        for jid, placement in admit:
            r = self.pending.pop(jid, None)
            if r is None:
                raise SimulationError(f"policy admitted {jid!r}, which is not pending")
            bad = [name for name in placement if name not in self.node_names]
            if bad:
                raise SimulationError(f"policy placed {jid!r} on unknown node(s) {bad}")
            j = self.jobs[jid]
            j.wait += t - j.queued_since
            j.start = t
            if j.first_start < 0:
                j.first_start = t
            used = self.run_g.get(r.tenant, 0)
            q = self.quotas.get(r.tenant)
            borrowed = q is None or used + r.total_gpus > q.guaranteed_gpus
            self.running[jid] = RunningJob(r, dict(placement), t, borrowed)
            self.run_g[r.tenant] = used + r.total_gpus
            self.seq += 1
            heapq.heappush(self.heap, (t + j.duration - j.progress, self.seq, jid, j.epoch))

    # ----------------------------------------------------------------------- metrics

    def done(self) -> list[_Job]:
        return [j for j in self.jobs.values() if j.finish >= 0]

    def summary(self) -> dict:
        """Counts, JCT and wait statistics, utilisation, fairness, preemption and timing."""
        jobs, done = self.jobs, self.done()
        ests = [
            j.req.estimated_duration / self.true_dur[jid]
            for jid, j in jobs.items()
            if j.req.estimated_duration is not None and self.true_dur.get(jid)
        ]
        out = {
            "estimate_over_true_p50": round(percentile(ests, 50), 2) if ests else None,
            "estimate_over_true_p90": round(percentile(ests, 90), 2) if ests else None,
            "resume_after_preemption": self.resume,
            "jobs": self.n,
            "completed": len(done),
            "unschedulable": len(self.unrunnable),
            "stuck": len(self.stuck),
            "killed_at_limit": sum(1 for j in jobs.values() if j.killed),
        }
        out.update(stats([j.finish - j.req.submit_time for j in done], "jct"))
        out.update(stats([j.wait for j in done], "wait"))
        out.update(stats([j.wait + j.lost_s for j in done], "wait_incl_lost"))
        span = max((j.finish for j in done), default=self.first_t) - self.first_t
        out.update(self.utilization(span))
        ratios = self.received_over_fair()
        out.update({
            "jain_index": round(jain_index(list(ratios.values())), 4),
            # Received beyond the entitlement counted as served, not as unfairness: a
            # tenant above 1 ran on GPUs the others' waiting gangs could not use at the
            # time, or kept jobs started before the others came (where nothing is reclaimed).
            "jain_index_capped": round(jain_index([min(x, 1.0) for x in ratios.values()]), 4),
            "tenants_with_demand": len(ratios),
            "preemptions": self.preemptions,
            "preempted_jobs": sum(1 for j in jobs.values() if j.preemptions),
            "lost_gpu_hours": round(sum(j.lost_gpu_s for j in jobs.values()) / 3600, 1),
            "quota_violations": self.quota_viol,
            "capacity_violations": self.cap_viol,
            "makespan_s": round(span, 1),
            "passes": self.passes,
            "schedule_avg_ms": (
                round(1000 * self.sched_time / self.passes, 3) if self.passes else 0.0
            ),
            "schedule_max_ms": round(1000 * self.sched_max, 3),
        })
        return out

    def utilization(self, span: float) -> dict[str, float]:
        """Busy GPU-seconds over cluster GPUs x span: steady part, whole span, until arrivals end."""
        gpus = self.cluster_gpus

        def ratio(busy: float, over: float) -> float:
            return round(busy / (gpus * over), 4) if over > 0 and gpus else 0.0

        return {
            "gpu_utilization_steady": ratio(self.busy_steady, self.steady1 - self.steady0),
            "gpu_utilization": ratio(self.busy_gpu_s, span),
            "gpu_utilization_until_last_arrival": ratio(
                self.busy_until_last_arrival, self.last_arrival - self.first_t
            ),
        }

    def tenant_names(self) -> list[str]:
        return sorted(set(self.fair) | set(self.recv) | {j.req.tenant for j in self.done()})

    def received_over_fair(self) -> dict[str, float]:
        """GPU-seconds received over the fair share, per tenant that had demand."""
        return {
            tenant: self.recv.get(tenant, 0.0) / self.fair[tenant]
            for tenant in self.tenant_names()
            if self.fair.get(tenant, 0.0) > 0
        }

    def tenant_rows(self) -> dict[str, dict]:
        quotas, done = self.quotas, self.done()
        total_recv = sum(self.recv.values()) or 1.0
        total_guar = sum(q.guaranteed_gpus for q in quotas.values()) or 1
        ratios = self.received_over_fair()
        tenants = {}
        for tenant in self.tenant_names():
            f = self.fair.get(tenant, 0.0)
            rcv = self.recv.get(tenant, 0.0)
            tj = [j for j in done if j.req.tenant == tenant]
            guar = q.guaranteed_gpus if (q := quotas.get(tenant)) else 0
            ratio = ratios.get(tenant)
            row = {
                "jobs_completed": len(tj),
                "guaranteed_gpus": guar,
                "entitlement": round(guar / total_guar, 4),
                "share_of_gpu_time": round(rcv / total_recv, 4),
                "gpu_hours": round(rcv / 3600, 1),
                "fair_gpu_hours": round(f / 3600, 1),
                "received_over_fair": None if ratio is None else round(ratio, 3),
                "preemptions": sum(j.preemptions for j in tj),
                "lost_gpu_hours": round(sum(j.lost_gpu_s for j in tj) / 3600, 2),
            }
            row.update(stats([j.finish - j.req.submit_time for j in tj], "jct"))
            row.update(stats([j.wait for j in tj], "wait"))
            tenants[tenant] = row
        return tenants


def per_job_rows(jobs: Mapping[str, _Job]) -> dict[str, dict]:
    return {
        jid: {
            "tenant": j.req.tenant,
            "gpus": j.req.total_gpus,
            "submit": j.req.submit_time,
            "first_start": j.first_start,
            "finish": j.finish,
            "run_s": j.duration,
            "estimate_s": j.req.estimated_duration,
            "killed_at_limit": j.killed,
            "wait_s": round(j.wait, 1),
            "lost_s": round(j.lost_s, 1),
            "preemptions": j.preemptions,
        }
        for jid, j in jobs.items()
    }
