#!/usr/bin/env python
"""One scheduling pass timed at the issue's size (10,000 pending jobs x 1,000 nodes; a full
cluster, a half-empty one, trace-shaped: 18 tenants, 4,000 mostly 1-GPU jobs running, and
shaped like the held-out trace: one of 18 tenants flooding 1-GPU jobs beside wide gangs),
and what live admission adds to a pass for fair share (``entitled_history`` over 34,000
jobs' demand). Each pass is timed beside the policy before the faster passes of issue 40
(``bench/scheduler_policy_baseline``), alternating which goes first, on the same states in the
same run, and the two decisions are checked to be the same (``--no-baseline``: the current
policy alone). Runs without Django:

    python bench/scheduler_micro.py [--repeats 100] [--out bench/results/scheduler_pass.json]

``bench/simulate.py`` runs the same cases into ``scheduler.json`` (``--no-micro`` skips them).
Run it alone on an idle machine: wall time on a shared one measures the others too, so the
CPU time of each pass is reported beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scheduling import (  # noqa: E402 - path set up above, no Django needed
    JobRequest,
    Node,
    QueueCache,
    Quota,
    RunningJob,
    Snapshot,
    percentile,
    schedule,
)
from scheduling.policy.entitlement import entitled_history  # noqa: E402

TIMED = ("p50_ms", "p99_ms", "cpu_p50_ms", "cpu_p99_ms")


def baseline_schedule():
    """``schedule`` of the policy before issue 40's faster passes (a frozen copy)."""
    from bench.scheduler_policy_baseline import schedule as before

    return before


def plain_decision(decision) -> tuple:
    """A decision as plain values, comparable across the two implementations' classes."""
    res = decision.reservation
    return (
        [(job_id, dict(placement)) for job_id, placement in decision.admit],
        list(decision.preempt),
        {job_id: tuple(w) for job_id, w in decision.waiting.items()},
        None if res is None else (res.job_id, res.start, dict(res.placement)),
    )


def trace_shaped_snapshot(seed: int = 1, running_n: int = 4_000, pending_n: int = 10_000):
    """The issue's case: 18 tenants (Philly-like weights), 1,000 8-GPU nodes, about 4,000
    running and 10,000 pending jobs, mostly 1 GPU (Philly's mix), standard time limits."""
    rng = random.Random(seed)
    nodes = [Node(f"n{i:04d}", 8, 64, 512_000) for i in range(1000)]
    tenants = [f"vc{i:02d}" for i in range(18)]
    weights = [rng.choice([1, 2, 4, 8]) for _ in tenants]
    quotas = {t: Quota(t, 8000 * w // sum(weights), 4000) for t, w in zip(tenants, weights, strict=True)}
    limits = (900, 1800, 3600, 7200, 14_400, 28_800, 43_200, 86_400, 172_800, 259_200, 604_800)

    def mk(i: int, t0: float) -> JobRequest:
        g = rng.choice([1] * 17 + [2, 4, 8, 16])
        w, gpw = (1, g) if g <= 8 else (g // 8, 8)
        return JobRequest(f"j{i}", rng.choices(tenants, weights)[0], 0, t0, w, gpw, 8 * gpw,
                          64_000 * gpw, float(rng.choice(limits)))

    running, free, i, k = [], [8] * len(nodes), 0, 0
    while len(running) < running_n:
        r = mk(i, -rng.uniform(0, 86_400))
        i += 1
        if r.workers > 1:
            continue
        while free[k % len(nodes)] < r.gpus_per_worker:
            k += 1
        n = k % len(nodes)
        free[n] -= r.gpus_per_worker
        running.append(RunningJob(r, {nodes[n].name: 1}, r.submit_time + rng.uniform(0, 3600)))
    pending = [mk(100_000 + j, -rng.uniform(0, 86_400)) for j in range(pending_n)]
    return Snapshot(nodes, quotas, running, pending, {t: rng.uniform(0, 1e7) for t in tenants},
                    entitled_history={t: rng.uniform(0, 1e7) for t in tenants})


def heldout_shaped_snapshot(seed: int = 1, running_n: int = 4_000, pending_n: int = 10_000):
    """Shaped like the held-out trace: 18 tenants on 1,000 8-GPU nodes, one of them flooding
    1-GPU jobs (most of the queue and of the running jobs) beside tenants that submit a few
    wide gangs (8 and 16 GPUs) and some small jobs, under guarantees from none to 1,024 GPUs;
    about 4,000 running jobs fill the cluster, so the gangs wait and one holds the EASY
    reservation."""
    rng = random.Random(f"heldout-{seed}")
    nodes = [Node(f"n{i:04d}", 8, 64, 512_000) for i in range(1000)]
    tenants = [f"ho{i:02d}" for i in range(18)]
    flood = tenants[0]
    guarantees = [1024] + [rng.choice([0, 0, 32, 64, 128, 256, 512]) for _ in tenants[1:]]
    quotas = {t: Quota(t, g, 4096 if t == flood else rng.choice([512, 2048, 4096]))
              for t, g in zip(tenants, guarantees, strict=True)}
    limits = (900, 3600, 14_400, 43_200, 86_400, 259_200, 604_800)

    def mk(i: int, t0: float, tenant: str | None = None) -> JobRequest:
        t = tenant or (flood if rng.random() < 0.85 else rng.choice(tenants[1:]))
        g = 1 if t == flood else rng.choice([1, 2, 8, 8, 16, 16])
        w, gpw = (1, g) if g <= 8 else (g // 8, 8)
        estimate = None if rng.random() < 0.05 else float(rng.choice(limits))
        return JobRequest(f"h{i}", t, 0, t0, w, gpw, 8 * gpw,
                          64_000 * gpw, estimate)

    # The flood tenant runs about 3,700 1-GPU jobs, the others whole nodes (8 GPUs each, a
    # 16-GPU gang on two): about 90% of the GPUs busy.
    running, free, i = [], [8] * len(nodes), 0
    wide_nodes = iter(range(len(nodes) - 1, -1, -1))
    while len(running) < running_n * 3 // 40:
        r = mk(i, -rng.uniform(0, 86_400), rng.choice(tenants[1:]))
        i += 1
        if r.gpus_per_worker != 8:
            continue
        placement = {}
        for _ in range(r.workers):
            n = next(wide_nodes)
            free[n] = 0
            placement[nodes[n].name] = 1
        running.append(RunningJob(r, placement, r.submit_time + rng.uniform(0, 3600)))
    k = 0
    while len(running) < running_n:
        r = mk(i, -rng.uniform(0, 86_400), flood)
        i += 1
        while free[k] < 1:
            k += 1
        free[k] -= 1
        running.append(RunningJob(r, {nodes[k].name: 1}, r.submit_time + rng.uniform(0, 3600)))
    pending = [mk(100_000 + j, -rng.uniform(0, 86_400)) for j in range(pending_n)]
    return Snapshot(nodes, quotas, running, pending, {t: rng.uniform(0, 1e7) for t in tenants},
                    entitled_history={t: rng.uniform(0, 1e7) for t in tenants})


def next_state(rng: random.Random, snap: Snapshot, k: int) -> Snapshot:
    """``snap`` a pass later: 1% of the queue gone and as many new jobs (copies of queued
    ones submitted just now), 1% of the running jobs replaced by others of the same shape
    on the same nodes. The other requests are the same objects (as the simulator and live
    admission keep them)."""
    pending = list(snap.pending)
    for i in range(max(len(pending) // 100, 1)):
        src = pending[rng.randrange(len(pending))]
        pending[rng.randrange(len(pending))] = dataclasses.replace(
            src, id=f"new{k}-{i}", submit_time=200.0 - rng.uniform(0, 60))
    running = list(snap.running)
    for i in range(len(running) // 100):
        at = rng.randrange(len(running))
        rj = running[at]
        running[at] = RunningJob(dataclasses.replace(rj.request, id=f"run{k}-{i}"),
                                 rj.placement, 200.0 - rng.uniform(0, 60), rj.borrowed)
    return Snapshot(snap.nodes, snap.quotas, running, pending, snap.usage_history,
                    snap.entitled_history)


def entitlement_benchmark(repeats: int, seed: int = 1, finished_n: int = 20_000) -> dict:
    """What live admission adds to a pass for fair share (``entitled_history``; the query
    aside): the trace-shaped case's 4,000 running and 10,000 queued jobs wanting GPUs until
    now, and ``finished_n`` jobs that finished over the three days before, on 8,000 GPUs."""
    rng = random.Random(seed)
    snap = trace_shaped_snapshot(seed)
    now, window = 0.0, 86_400.0
    wanted = [(r.tenant, r.total_gpus, r.submit_time, now) for r in snap.pending]
    wanted += [(rj.request.tenant, rj.request.total_gpus, rj.request.submit_time, now)
               for rj in snap.running]
    for _ in range(finished_n):
        end = -rng.uniform(0, 3 * window)
        r = snap.pending[rng.randrange(len(snap.pending))]
        wanted.append((r.tenant, r.total_gpus, end - rng.uniform(60, 2 * window), end))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        entitled_history(wanted, snap.quotas, 8000, now, window)
        times.append((time.perf_counter() - t0) * 1000)
    return {"intervals": len(wanted), "tenants": len(snap.quotas), "repeats": repeats,
            "p50_ms": round(percentile(times, 50), 2), "p99_ms": round(percentile(times, 99), 2),
            "load_average_1m": round(os.getloadavg()[0], 1)}


def timings(times: list[float], cpu: list[float]) -> dict:
    return {"p50_ms": round(percentile(times, 50), 2), "p99_ms": round(percentile(times, 99), 2),
            "max_ms": round(max(times), 2), "cpu_p50_ms": round(percentile(cpu, 50), 2),
            "cpu_p99_ms": round(percentile(cpu, 99), 2)}


def micro_benchmark(repeats: int, seed: int = 1, baseline=None, cached: bool = True) -> dict:
    """``repeats`` passes per case, each on the state a pass after the one before
    (``next_state``): the current pass with its ``QueueCache`` carried from pass to pass
    (``cached``) and without it, and with ``baseline`` (another ``schedule``) that one too,
    on the same states in the same run, rotating which goes first; every side must decide
    each state alike."""
    rng = random.Random(seed)
    nodes = [Node(f"n{i:04d}", 8, 64, 512_000) for i in range(1000)]
    tenants = [f"lab-{i:02d}" for i in range(20)]
    quotas = {t: Quota(t, 400, 2000) for t in tenants}

    def mk(i: int, t0: float) -> JobRequest:
        g = rng.choice([1] * 10 + [2, 2, 4, 4, 8, 8, 8, 16, 32])
        w, gpw = (1, g) if g <= 8 else (g // 8, 8)
        return JobRequest(f"j{i}", rng.choice(tenants), rng.choice([0, 0, 0, 1]), t0 + i, w,
                          gpw, 4 * gpw, 32_000 * gpw, rng.uniform(60, 86_400))

    fill = [mk(i, 0) for i in range(12_000)]
    d = schedule(Snapshot(nodes, quotas, [], fill), 0)
    byid = {j.id: j for j in fill}
    running = [RunningJob(byid[jid], p, -rng.uniform(0, 3600), False) for jid, p in d.admit]
    pending = [mk(20_000 + i, 100) for i in range(10_000)]
    history = {t: rng.uniform(0, 1e7) for t in tenants}
    out = {}
    scenarios = {
        "full_cluster": Snapshot(nodes, quotas, running, pending, history),
        "half_empty_cluster": Snapshot(nodes, quotas, running[: len(running) // 2], pending,
                                       history),
        "trace_shaped": trace_shaped_snapshot(seed),
        "heldout_shaped": heldout_shaped_snapshot(seed),
    }
    # current: with its cache from pass to pass (``cached``); current_uncached: without.
    sides = {"current": None, "current_uncached": schedule} if cached else {
        "current": schedule}
    if baseline is not None:
        sides["baseline"] = baseline
    for name, first in scenarios.items():
        # The states passes see one after another: between two, 1% of the queue leaves and
        # as many jobs arrive, and 1% of the running jobs end and others start in their
        # place (the shape of each case stays as it is).
        states = [first]
        churn = random.Random(f"churn-{name}")
        for k in range(1, repeats):
            states.append(next_state(churn, states[-1], k))
        cache = QueueCache()
        if cached:
            schedule(first, 200.0, None, cache)  # (the pass before the first timed one)
        times: dict[str, list[float]] = {side: [] for side in sides}
        # CPU time of the pass: on a shared machine wall time measures the others too.
        cpu: dict[str, list[float]] = {side: [] for side in sides}
        order = list(sides)
        for k, snap in enumerate(states):
            decisions = {}
            for side in order[k % len(order):] + order[:k % len(order)]:
                gc.collect()  # GC stays enabled during the call; only leftovers are cleared
                t0, c0 = time.perf_counter(), time.process_time()
                if side == "current" and cached:
                    decisions[side] = schedule(snap, 200.0, None, cache)
                else:
                    decisions[side] = sides[side](snap, 200.0)
                times[side].append((time.perf_counter() - t0) * 1000)
                cpu[side].append((time.process_time() - c0) * 1000)
            plain = {side: plain_decision(d) for side, d in decisions.items()}
            if any(p != plain["current"] for p in plain.values()):
                raise SystemExit(f"{name}, pass {k}: the sides decide differently")
        dec = decisions["current"]
        out[name] = {
            "nodes": len(first.nodes),
            "pending": len(first.pending),
            "running": len(first.running),
            "repeats": repeats,
            **timings(times["current"], cpu["current"]),
            "load_average_1m": round(os.getloadavg()[0], 1),
            "admitted": len(dec.admit),
            "preempted": len(dec.preempt),
        }
        if cached:
            out[name]["uncached"] = timings(times["current_uncached"], cpu["current_uncached"])
        if baseline is not None:
            before = out[name]["baseline"] = timings(times["baseline"], cpu["baseline"])
            out[name]["current_over_baseline"] = {
                k: round(out[name][k] / before[k], 3) for k in TIMED}
            if cached:
                out[name]["uncached_over_baseline"] = {
                    k: round(out[name]["uncached"][k] / before[k], 3) for k in TIMED}
    return out


def print_micro(results: dict) -> None:
    if "entitled_history_benchmark" in results:
        m = results["entitled_history_benchmark"]
        print(f"entitled_history(): p50 {m['p50_ms']} ms, p99 {m['p99_ms']} ms "
              f"({m['intervals']} jobs' demand, {m['tenants']} tenants)")
    for name, m in results.get("schedule_micro_benchmark", {}).items():
        print(f"schedule() {name}: p50 {m['p50_ms']} ms, p99 {m['p99_ms']} ms "
              f"(CPU p50 {m['cpu_p50_ms']} ms, p99 {m['cpu_p99_ms']} ms; "
              f"load {m['load_average_1m']}) "
              f"({m['pending']} pending, {m['nodes']} nodes, {m['running']} running)")
        if "uncached" in m:
            u = m["uncached"]
            print(f"  without the cache: p50 {u['p50_ms']} ms, p99 {u['p99_ms']} ms (CPU p50 "
                  f"{u['cpu_p50_ms']} ms, p99 {u['cpu_p99_ms']} ms)")
        if "baseline" in m:
            b, r = m["baseline"], m["current_over_baseline"]
            print(f"  baseline: p50 {b['p50_ms']} ms, p99 {b['p99_ms']} ms (CPU p50 "
                  f"{b['cpu_p50_ms']} ms, p99 {b['cpu_p99_ms']} ms); current/baseline p50 "
                  f"x{r['p50_ms']}, p99 x{r['p99_ms']} (CPU x{r['cpu_p50_ms']}, "
                  f"x{r['cpu_p99_ms']}); same decisions")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "scheduler_pass.json"))
    ap.add_argument("--no-baseline", action="store_true",
                    help="time the current policy alone (no side-by-side baseline)")
    args = ap.parse_args(argv)
    baseline = None if args.no_baseline else baseline_schedule()
    results = {
        "generated_by": "bench/scheduler_micro.py",
        "command": f"python bench/scheduler_micro.py --repeats {args.repeats}"
                   + (" --no-baseline" if args.no_baseline else ""),
        "baseline": None if args.no_baseline else "bench/scheduler_policy_baseline (1f5e4f8)",
        "schedule_micro_benchmark": micro_benchmark(args.repeats, baseline=baseline),
        "entitled_history_benchmark": entitlement_benchmark(args.repeats),
    }
    print_micro(results)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
