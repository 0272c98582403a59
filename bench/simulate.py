#!/usr/bin/env python
"""Trace-driven benchmark of Gantry's GPU scheduler against a strict FIFO baseline.

Runs without Django:  python bench/simulate.py [--trace philly] [--out bench/results/scheduler.json]

Philly setup (documented choice, fixed before looking at the results):
* a contiguous window of ``--count`` jobs (default 5,000) starting at job ``--start`` (default
  20,000: mid-trace, past the sparse first weeks), submit times shifted to start at 0;
* a cluster of ``--nodes`` nodes (default 32) of 8 GPUs / 64 CPUs / 512 GB, i.e. 256 GPUs,
  about half the window's offered load, so that a queue builds;
* per-tenant guaranteed GPUs proportional to the tenant's virtual-cluster node count in
  ``philly_vc_nodes.csv`` (tenants absent from it get 0), each may borrow up to half the
  cluster on top of that;
* estimated durations: the real duration (oracle); a second Gantry run uses a user-style
  over-estimate model (see jobs/scheduler/simulator.py); a second window (``--start2``)
  checks that the result is not an artefact of one window.

Also a micro-benchmark: ``schedule()`` over 10,000 pending jobs and 1,000 nodes, p50/p99 over
repeated calls, for a full cluster (steady state) and a half-empty one (many admissions).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from jobs.scheduler import (  # noqa: E402 - path set up above, no Django needed
    JobRequest,
    Node,
    Quota,
    RunningJob,
    Snapshot,
    load_trace,
    load_vc_nodes,
    percentile,
    run_simulation,
    schedule,
    window,
)

TRACES = os.path.join(os.path.dirname(ROOT), "shared", "traces")


def cluster(n: int) -> list[Node]:
    return [Node(f"node-{i:04d}", 8, 64, 512_000, "") for i in range(n)]


def philly_quotas(jobs, nodes, vc_nodes: dict[str, int]) -> dict[str, Quota]:
    total = sum(n.gpus for n in nodes)
    vc_total = sum(vc_nodes.values()) or 1
    tenants = sorted({j.tenant for j in jobs} | set(vc_nodes))
    return {t: Quota(t, total * vc_nodes.get(t, 0) // vc_total, total // 2) for t in tenants}


def compare(g: dict, f: dict) -> dict:
    def red(key: str) -> float | None:
        return round(1 - g[key] / f[key], 4) if f[key] else None

    return {
        "avg_jct_reduction": red("avg_jct_s"),
        "p95_jct_reduction": red("p95_jct_s"),
        "avg_wait_reduction": red("avg_wait_s"),
        "p95_wait_reduction": red("p95_wait_s"),
    }


def run_window(name, trace, vc_nodes, start, count, nodes_n, runs, estimate_variants):
    jobs = window(trace, start, count)
    nodes = cluster(nodes_n)
    quotas = philly_quotas(jobs, nodes, vc_nodes)
    span = jobs[-1].submit_time - jobs[0].submit_time
    meta = {
        "window_start_job": start,
        "jobs": len(jobs),
        "arrival_span_h": round(span / 3600, 1),
        "offered_gpu_hours": round(sum(j.duration * j.num_gpus for j in jobs) / 3600, 1),
        "cluster_gpus": sum(n.gpus for n in nodes),
        "nodes": nodes_n,
        "quotas": {t: [q.guaranteed_gpus, q.borrow_limit_gpus] for t, q in quotas.items()},
    }
    out = {"setup": meta}
    for policy, estimate in [("fifo", "oracle"), ("gantry", "oracle")] + [
        ("gantry", e) for e in estimate_variants
    ]:
        key = f"{policy}" if estimate == "oracle" else f"{policy}_{estimate}_estimates"
        print(f"  running {name}/{key} ...", flush=True)
        res = run_simulation(jobs, nodes, quotas, policy, estimate=estimate)
        res.pop("per_job", None)
        out[key] = res
        runs.append((f"{name}/{key}", res))
    out["gantry_vs_fifo"] = compare(out["gantry"], out["fifo"])
    return out


def micro_benchmark(repeats: int, seed: int = 1) -> dict:
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
    }
    for name, snap in scenarios.items():
        times = []
        dec = None
        for _ in range(repeats):
            gc.collect()  # GC stays enabled during the call; only leftovers are cleared
            t0 = time.perf_counter()
            dec = schedule(snap, 200.0)
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = {
            "nodes": len(nodes),
            "pending": len(pending),
            "running": len(snap.running),
            "repeats": repeats,
            "p50_ms": round(percentile(times, 50), 2),
            "p99_ms": round(percentile(times, 99), 2),
            "max_ms": round(max(times), 2),
            "admitted": len(dec.admit),
            "preempted": len(dec.preempt),
        }
    return out


def print_table(runs) -> None:
    cols = [("avg_jct_s", "avgJCT h", 3600), ("p95_jct_s", "p95JCT h", 3600),
            ("avg_wait_s", "avgWait h", 3600), ("p95_wait_s", "p95Wait h", 3600),
            ("gpu_utilization_until_last_arrival", "util", 1), ("jain_index", "Jain", 1),
            ("preemptions", "preempt", 1), ("quota_violations", "violations", 1),
            ("wall_s", "wall s", 1)]
    width = max(len(n) for n, _ in runs) + 2
    print("".join(["run".ljust(width)] + [c[1].rjust(11) for c in cols]))
    for name, r in runs:
        cells = []
        for key, _, div in cols:
            v = r[key]
            cells.append((f"{v / div:.2f}" if isinstance(v, float) else str(v)).rjust(11))
        print(name.ljust(width) + "".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", choices=["philly", "alibaba"], default="philly")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "scheduler.json"))
    ap.add_argument("--traces-dir", default=TRACES)
    ap.add_argument("--start", type=int, default=20_000)
    ap.add_argument("--start2", type=int, default=30_000, help="second window; -1 to skip")
    ap.add_argument("--count", type=int, default=5_000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--micro-repeats", type=int, default=100)
    ap.add_argument("--no-micro", action="store_true")
    args = ap.parse_args(argv)

    results: dict = {"trace": args.trace, "generated_by": "bench/simulate.py"}
    runs: list = []
    t0 = time.perf_counter()
    if not args.no_micro:
        print("  micro-benchmark: schedule() with 10,000 pending x 1,000 nodes ...", flush=True)
        results["schedule_micro_benchmark"] = micro_benchmark(args.micro_repeats)
    if args.trace == "philly":
        trace = load_trace(os.path.join(args.traces_dir, "philly_vc.csv.gz"))
        vc_nodes = load_vc_nodes(os.path.join(args.traces_dir, "philly_vc_nodes.csv"))
        results["main"] = run_window("philly", trace, vc_nodes, args.start, args.count,
                                     args.nodes, runs, ["user"])
        if args.start2 >= 0:
            results["second_window"] = run_window("philly2", trace, vc_nodes, args.start2,
                                                  args.count, args.nodes, runs, [])
        main_cmp = results["main"]["gantry_vs_fifo"]
        g = results["main"]["gantry"]
        results["targets"] = {
            "avg_jct_reduction>=0.30": main_cmp["avg_jct_reduction"] is not None
            and main_cmp["avg_jct_reduction"] >= 0.30,
            "avg_wait_reduction>=0.60": main_cmp["avg_wait_reduction"] is not None
            and main_cmp["avg_wait_reduction"] >= 0.60,
            "jain>=0.9": g["jain_index"] >= 0.9,
            "quota_violations==0": g["quota_violations"] == 0
            and results["main"]["fifo"]["quota_violations"] == 0,
        }
    else:
        trace = load_trace(os.path.join(args.traces_dir, "alibaba_openb_week.csv"))
        nodes = cluster(args.nodes)
        total = sum(n.gpus for n in nodes)
        quotas = {"default": Quota("default", total, 0)}
        out = {"setup": {"jobs": len(trace), "cluster_gpus": total}}
        for policy in ("fifo", "gantry"):
            print(f"  running alibaba/{policy} ...", flush=True)
            res = run_simulation(trace, nodes, quotas, policy)
            res.pop("per_job", None)
            out[policy] = res
            runs.append((f"alibaba/{policy}", res))
        out["gantry_vs_fifo"] = compare(out["gantry"], out["fifo"])
        results["main"] = out
    results["bench_wall_s"] = round(time.perf_counter() - t0, 1)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=False)
    os.replace(tmp, args.out)

    print()
    print_table(runs)
    for name in ("main", "second_window"):
        if name in results:
            print(f"{name}: gantry vs fifo {results[name]['gantry_vs_fifo']}")
    if "targets" in results:
        print("targets:", results["targets"])
    for name, m in results.get("schedule_micro_benchmark", {}).items():
        print(f"schedule() {name}: p50 {m['p50_ms']} ms, p99 {m['p99_ms']} ms "
              f"({m['pending']} pending, {m['nodes']} nodes, {m['running']} running)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
