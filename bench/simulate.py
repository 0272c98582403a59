#!/usr/bin/env python
"""Trace-driven benchmark of Gantry's GPU scheduler beside honest baselines.

Runs without Django:  python bench/simulate.py [--out bench/results/scheduler.json]

What runs (documented choices, fixed before looking at the results):

* **Estimates are realistic** (``--estimate realistic``, the default): what live Gantry knows,
  the job's timeout. The Philly trace has no requested times, so they come from the
  user-estimate model in scheduling/simulator.py (heavy over-estimation, some
  under-estimation: such jobs are killed at their limit, for every policy alike). The oracle
  (true durations) runs only with ``--estimate oracle`` or as the extra, labelled
  ``gantry_oracle`` row of the reference window.
* **Policies side by side, same jobs, nodes, quotas and estimates**: ``fifo`` (strict),
  ``easy`` (FIFO + EASY backfill: what the clusters these traces come from ran), ``las`` (a
  size-blind Tiresias-style least-attained-service reference with perfect checkpoints: an
  upper reference, not a like-for-like baseline), ``before`` (the policy as it was before
  issue 28, loaded from git: ``--before-ref``), ``gantry`` (today's policy, defaults),
  ``fair_ceiling`` (how far fair share alone goes: tenant-first order, reclaim at once and
  perfect checkpoints; a reference for the Jain goal, see ``FAIR_CEILING``) and, on the
  reference window, ``gantry_live`` (the config live admission runs: guards on reclaim off).
* **Quotas from the trace's groups**: each Philly virtual cluster is guaranteed GPUs in
  proportion to its node count in ``philly_vc_nodes.csv`` and may borrow up to half the
  cluster on top: a tenant's limit is below the cluster, so violations are possible (and
  checked independently after every pass).
* **Reference window**: ``--count`` jobs (5,000) from job ``--start`` (20,000) on ``--nodes``
  (32) nodes of 8 GPUs / 64 CPUs / 512 GB.
* **Sweep**: every full 1,000-job window of the trace (jobs 0-999, 1,000-1,999, ...) on 8
  nodes (``--sweep-nodes``), all policies but the oracle; goals checked per window.
* **Alibaba**: the openb week's 448 finished pods, QoS classes as tenants, arrivals compressed
  10, 20 and 40 times onto 4 nodes (``--alibaba-speedups``, ``--alibaba-nodes``); see ``alibaba``.

Goals (issue 28), reported per window and in ``goals``: average JCT <= easy, p95 wait <= easy,
Jain's index >= 0.9, 0 quota violations, and GPU-hours lost to preemption at most half of the
``before`` policy's (summed over the windows, and on the reference window).

Also the micro-benchmark of ``bench/scheduler_micro.py``: ``schedule()`` over 10,000 pending
jobs and 1,000 nodes, p50/p99 over repeated calls (a full cluster, a half-empty one and the
trace-shaped case), and live admission's ``entitled_history`` (``--no-micro`` skips them).
``--out`` writes the JSON and, beside it, ``<name>.jobs.csv.gz``: one row per job and policy of
the reference window.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from multiprocessing import Pool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scheduler_micro import entitlement_benchmark, micro_benchmark, print_micro  # noqa: E402

from scheduling import (  # noqa: E402 - path set up above, no Django needed
    Node,
    PolicyConfig,
    Quota,
    load_trace,
    load_vc_nodes,
    run_simulation,
    window,
)
from scheduling.sim_metrics import trace_fairness  # noqa: E402
from scheduling.simulator import private_slices  # noqa: E402

# The shared traces: beside the checkout, or where GANTRY_TRACES says.
TRACES = os.environ.get("GANTRY_TRACES", os.path.join(os.path.dirname(ROOT), "shared", "traces"))
BEFORE_REF = "884dfb6"  # jobs/scheduler/policy.py before issue 28
LIVE_CONFIG = PolicyConfig(  # as scheduling/admission.py's POLICY (no Django here to import it)
    min_runtime_before_preempt_s=0.0,
    reclaim_after_wait_s=0.0,
    reclaim_work_ratio=float("inf"),
    reclaim_min_remaining_s=0.0,
)
# How far fair share alone can go: tenants strictly by received over entitled GPUs (an hour
# per doubling x 10^4), reclaim at once with no guards, and preempted jobs resume where they
# stopped (perfect checkpoints: nothing lost). Not a policy to run (it throws away the size
# ranking's JCT and assumes every job checkpoints), a reference for the Jain goal.
FAIR_CEILING = "fair_ceiling"
FAIR_CEILING_CONFIG = replace(LIVE_CONFIG, fair_share_s=3.6e7)
SWEEP_POLICIES = ("fifo", "easy", "las", "before", "gantry", "gantry_guarantee_first",
                  FAIR_CEILING)
# A variant measured beside, not the default (PolicyConfig.guarantee_first): its goals are
# reported under goals_guarantee_first / windows_failing_guarantee_first.
VARIANT = "gantry_guarantee_first"
REUSABLE = ("fifo", "easy", "las", "before")


def cluster(n: int) -> list[Node]:
    return [Node(f"node-{i:04d}", 8, 64, 512_000, "") for i in range(n)]


def philly_quotas(jobs, nodes, vc_nodes: dict[str, int]) -> dict[str, Quota]:
    total = sum(n.gpus for n in nodes)
    vc_total = sum(vc_nodes.values()) or 1
    tenants = sorted({j.tenant for j in jobs} | set(vc_nodes))
    return {t: Quota(t, total * vc_nodes.get(t, 0) // vc_total, total // 2) for t in tenants}


_BEFORE = None


def before_policy(ref: str = BEFORE_REF):
    """``schedule`` of the policy (jobs/scheduler/policy.py then) at git ``ref``, as a simulator policy."""
    global _BEFORE
    if _BEFORE is None or _BEFORE[0] != ref:
        src = subprocess.run(
            ["git", "-C", ROOT, "show", f"{ref}:jobs/scheduler/policy.py"],
            check=True, capture_output=True, text=True,
        ).stdout
        path = os.path.join(tempfile.mkdtemp(prefix="gantry-policy-"), "policy_before.py")
        with open(path, "w") as fh:
            fh.write(src)
        spec = importlib.util.spec_from_file_location("policy_before", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["policy_before"] = mod
        spec.loader.exec_module(mod)

        def before(snap, now):
            return mod.schedule(snap, now, mod.PolicyConfig())

        before.__name__ = "before"
        _BEFORE = (ref, before)
    return _BEFORE[1]


def run_one(jobs, nodes, quotas, name: str, estimate: str, before_ref: str, keep_jobs=False,
            private=False):
    if name == "before":
        policy, cfg = before_policy(before_ref), None
    elif name == "gantry_live":
        policy, cfg = "gantry", LIVE_CONFIG
    elif name == VARIANT:
        policy, cfg = "gantry", PolicyConfig(guarantee_first=True)
    elif name == "gantry_oracle":
        policy, cfg, estimate = "gantry", None, "oracle"
    elif name == FAIR_CEILING:
        policy, cfg = "gantry", FAIR_CEILING_CONFIG
    else:
        policy, cfg = name, None
    res = run_simulation(jobs, nodes, quotas, policy, estimate=estimate, config=cfg,
                         keep_jobs=keep_jobs, resume=True if name == FAIR_CEILING else None,
                         private=private)
    res["policy"] = name
    return res


def summary(r: dict) -> dict:
    keys = ("avg_jct_s", "p50_jct_s", "p95_jct_s", "avg_wait_s", "p50_wait_s", "p95_wait_s",
            "avg_wait_incl_lost_s", "p95_wait_incl_lost_s", "gpu_utilization_steady",
            "jain_index", "jain_index_capped", "preemptions", "lost_gpu_hours", "quota_violations",
            "capacity_violations", "completed", "unschedulable", "stuck", "killed_at_limit")
    out = {k: r[k] for k in keys}
    if "fairness" in r:  # the sharing incentive (issue 40): rho per tenant, guarantee-fit wait
        out["fairness"] = r["fairness"]
        out["rho"] = {t: [x["rho"], x["jobs"]] for t, x in r["sharing"].items()
                      if x["rho"] is not None}
    return out


def fairness_by_policy(rows: list[dict], policies) -> dict:
    """The trace summary of the sharing incentive per policy (``sim_metrics.trace_fairness``)."""
    return {p: trace_fairness([r[p]["fairness"] for r in rows if "fairness" in r[p]])
            for p in policies}


def goals_of(res: dict) -> dict:
    g, e, b = res["gantry"], res["easy"], res.get("before")
    out = {
        "avg_jct<=easy": g["avg_jct_s"] <= e["avg_jct_s"],
        "p95_wait<=easy": g["p95_wait_s"] <= e["p95_wait_s"],
        "jain>=0.9": g["jain_index"] >= 0.9,
        "quota_violations==0": g["quota_violations"] == 0,
    }
    if b is not None:
        out["lost<=half_before"] = g["lost_gpu_hours"] <= 0.5 * b["lost_gpu_hours"]
    return out


def _sweep_window(args):
    trace_path, vc_path, start, count, nodes_n, estimate, before_ref, reused = args
    trace = _trace_cache(trace_path)
    vc = load_vc_nodes(vc_path)
    jobs = window(trace, start, count)
    nodes = cluster(nodes_n)
    quotas = philly_quotas(jobs, nodes, vc)
    private = private_slices(jobs, nodes, quotas, estimate=estimate)
    out = {"start": start, "offered_gpu_hours": round(sum(j.duration * j.num_gpus
                                                          for j in jobs) / 3600, 1),
           "arrival_span_h": round((jobs[-1].submit_time - jobs[0].submit_time) / 3600, 1)}
    for name in SWEEP_POLICIES:
        if name in reused:
            out[name] = reused[name]
        else:
            out[name] = summary(run_one(jobs, nodes, quotas, name, estimate, before_ref,
                                        private=private))
    out["goals"] = goals_of(out)
    out["goals_guarantee_first"] = goals_of({**out, "gantry": out[VARIANT]})
    return out


_TRACE = {}


def _trace_cache(path):
    if path not in _TRACE:
        _TRACE[path] = load_trace(path)
    return _TRACE[path]


COLS = [("avg_jct_s", "avgJCT h", 3600), ("p50_jct_s", "p50JCT h", 3600),
        ("p95_jct_s", "p95JCT h", 3600), ("avg_wait_s", "avgWait h", 3600),
        ("p50_wait_s", "p50Wait h", 3600), ("p95_wait_s", "p95Wait h", 3600),
        ("avg_wait_incl_lost_s", "w+lost h", 3600), ("gpu_utilization_steady", "util", 1),
        ("jain_index", "Jain", 1), ("preemptions", "preempt", 1),
        ("lost_gpu_hours", "lostGPUh", 1), ("quota_violations", "quotaViol", 1),
        ("killed_at_limit", "killed", 1)]


def print_table(rows) -> None:
    width = max(len(n) for n, _ in rows) + 2
    print("".join(["policy".ljust(width)] + [c[1].rjust(10) for c in COLS]))
    for name, r in rows:
        cells = []
        for key, _, div in COLS:
            v = r[key]
            cells.append((f"{v / div:.2f}" if isinstance(v, float) else str(v)).rjust(10))
        print(name.ljust(width) + "".join(cells))


def print_tenants(name: str, r: dict) -> None:
    print(f"  per tenant ({name}):")
    print("    tenant    guar  jobs  avgJCT h  p50JCT h  p95JCT h  p95Wait h  GPUh   fairGPUh "
          " recv/fair  lostGPUh")
    for t, row in r["tenants"].items():
        if not row["jobs_completed"] and not row["gpu_hours"]:
            continue
        rf = row["received_over_fair"]
        print(f"    {t:<9} {row['guaranteed_gpus']:>4} {row['jobs_completed']:>5} "
              f"{row['avg_jct_s'] / 3600:>9.2f} {row['p50_jct_s'] / 3600:>9.2f} "
              f"{row['p95_jct_s'] / 3600:>9.2f} {row['p95_wait_s'] / 3600:>10.2f} "
              f"{row['gpu_hours']:>6.0f} {row['fair_gpu_hours']:>9.0f} "
              f"{'-' if rf is None else f'{rf:.2f}':>10} {row['lost_gpu_hours']:>9.1f}")


def write_jobs_csv(path: str, runs: dict) -> None:
    fields = ["policy", "job_id", "tenant", "gpus", "submit", "first_start", "finish", "run_s",
              "estimate_s", "killed_at_limit", "wait_s", "lost_s", "preemptions"]
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for name, res in runs.items():
            for jid, row in (res.get("per_job") or {}).items():
                w.writerow([name, jid] + [row[f] for f in fields[2:]])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "scheduler.json"))
    ap.add_argument("--traces-dir", default=TRACES)
    ap.add_argument("--estimate", choices=["realistic", "user", "oracle", "none"],
                    default="realistic")
    ap.add_argument("--start", type=int, default=20_000)
    ap.add_argument("--count", type=int, default=5_000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--sweep-nodes", type=int, default=8)
    ap.add_argument("--sweep-count", type=int, default=1_000)
    ap.add_argument("--sweep-starts", help="comma-separated window starts (default: all)")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-main", action="store_true")
    ap.add_argument("--alibaba-nodes", type=int, default=4)
    ap.add_argument("--alibaba-speedups", default="10,20,40",
                    help="comma-separated arrival compressions of the Alibaba week")
    ap.add_argument("--no-alibaba", action="store_true")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--before-ref", default=BEFORE_REF)
    ap.add_argument("--micro-repeats", type=int, default=100)
    ap.add_argument("--no-micro", action="store_true")
    ap.add_argument("--reuse", metavar="RESULTS_JSON",
                    help="take the baselines (fifo, easy, las, before) from an earlier run's "
                         "JSON with the same trace, windows and estimates instead of "
                         "replaying them (their code did not change); recorded in the output")
    args = ap.parse_args(argv)
    args.prev = None
    if args.reuse:
        with open(args.reuse) as fh:
            args.prev = json.load(fh)
        if args.prev.get("estimate") != args.estimate:
            ap.error(f"{args.reuse} was made with estimates {args.prev.get('estimate')!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prev = args.prev
    trace_path = os.path.join(args.traces_dir, "philly_vc.csv.gz")
    vc_path = os.path.join(args.traces_dir, "philly_vc_nodes.csv")
    trace = _trace_cache(trace_path)
    results: dict = {
        "trace": "philly",
        "generated_by": "bench/simulate.py",
        "estimate": args.estimate,
        "trace_rows_skipped": trace.skip_counts,
        "before_ref": args.before_ref,
    }
    if prev is not None:
        results["baselines_reused_from"] = {
            "file": os.path.basename(args.reuse), "policies": list(REUSABLE),
            "note": "FIFO, FIFO + EASY, LAS and the pre-issue-28 policy replayed by an earlier "
                    "run of this script; only Gantry's rows are new",
        }
    t0 = time.perf_counter()
    if not args.no_micro:
        print("  micro-benchmark: schedule() with 10,000 pending x 1,000 nodes ...", flush=True)
        results["schedule_micro_benchmark"] = micro_benchmark(args.micro_repeats)
        results["entitled_history_benchmark"] = entitlement_benchmark(args.micro_repeats)
    if not args.no_main:
        results["reference_window"] = reference_window(args, trace, load_vc_nodes(vc_path))
    if not args.no_sweep:
        results["sweep"] = sweep(args, trace, trace_path, vc_path)
    if not args.no_alibaba:
        results["alibaba"] = alibaba(args)
    results["bench_wall_s"] = round(time.perf_counter() - t0, 1)
    if args.out:
        write_json(args.out, results)
    print_micro(results)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def reference_window(args: argparse.Namespace, trace, vc_nodes: dict[str, int]) -> dict:
    """Every policy (and the live and oracle variants of Gantry's) on the reference window;
    writes the per-job CSV beside ``--out`` and prints the tables."""
    prev = args.prev
    jobs = window(trace, args.start, args.count)
    nodes = cluster(args.nodes)
    quotas = philly_quotas(jobs, nodes, vc_nodes)
    main_runs = {}
    private = private_slices(jobs, nodes, quotas, estimate=args.estimate)
    for name in (*SWEEP_POLICIES, "gantry_live", "gantry_oracle"):
        if prev is not None and name in REUSABLE:
            main_runs[name] = prev["reference_window"][name]
            continue
        print(f"  reference window: {name} ...", flush=True)
        main_runs[name] = run_one(jobs, nodes, quotas, name, args.estimate, args.before_ref,
                                  keep_jobs=True,
                                  private=private if name != "gantry_oracle" else True)
    ref = {
        "setup": {
            "window_start_job": args.start,
            "jobs": len(jobs),
            "arrival_span_h": round((jobs[-1].submit_time - jobs[0].submit_time) / 3600, 1),
            "offered_gpu_hours": round(sum(j.duration * j.num_gpus for j in jobs) / 3600, 1),
            "cluster_gpus": sum(n.gpus for n in nodes),
            "nodes": args.nodes,
            "quotas": {t: [q.guaranteed_gpus, q.borrow_limit_gpus] for t, q in quotas.items()},
            "estimate": args.estimate,
            "estimate_over_true_p50": main_runs["gantry"]["estimate_over_true_p50"],
            "estimate_over_true_p90": main_runs["gantry"]["estimate_over_true_p90"],
        },
    }
    for name, res in main_runs.items():
        ref[name] = {k: v for k, v in res.items() if k != "per_job"}
    ref["goals"] = goals_of(ref)
    ref["goals_guarantee_first"] = goals_of({**ref, "gantry": ref[VARIANT]})
    if args.out:
        write_reference_csv(args, main_runs)
    print()
    print(f"reference window: jobs {args.start}-{args.start + len(jobs) - 1}, "
          f"{args.nodes} nodes, estimates {args.estimate} "
          f"(estimate/true p50 {ref['setup']['estimate_over_true_p50']}, "
          f"p90 {ref['setup']['estimate_over_true_p90']}); gantry_oracle uses true "
          "durations (ORACLE)")
    print_table([(n, r) for n, r in main_runs.items()])
    for name in ("easy", "gantry"):
        print_tenants(name, main_runs[name])
    print("goals:", ref["goals"])
    return ref


def write_reference_csv(args: argparse.Namespace, main_runs: dict) -> None:
    """``<out>.jobs.csv.gz``: this run's rows, plus the reused baselines' rows of ``--reuse``."""
    jobs_csv = os.path.splitext(args.out)[0] + ".jobs.csv.gz"
    old_csv = os.path.splitext(args.reuse)[0] + ".jobs.csv.gz" if args.prev else None
    kept = []
    if old_csv and os.path.exists(old_csv):
        with gzip.open(old_csv, "rt", newline="") as fh:
            kept = [row for row in csv.reader(fh) if row and row[0] in REUSABLE]
    write_jobs_csv(jobs_csv, main_runs)
    if kept:
        with gzip.open(jobs_csv, "at", newline="") as fh:
            csv.writer(fh).writerows(kept)


def sweep(args: argparse.Namespace, trace, trace_path: str, vc_path: str) -> dict:
    """Every full window of ``--sweep-count`` jobs (or ``--sweep-starts``), goals per window."""
    starts = (
        [int(x) for x in args.sweep_starts.split(",")]
        if args.sweep_starts
        else list(range(0, len(trace) - args.sweep_count + 1, args.sweep_count))
    )
    old_rows = {r["start"]: r for r in (args.prev or {}).get("sweep", {}).get("windows", [])}
    work = [(trace_path, vc_path, s, args.sweep_count, args.sweep_nodes, args.estimate,
             args.before_ref,
             {p: old_rows[s][p] for p in REUSABLE} if s in old_rows else {})
            for s in starts]
    print(f"\n  sweep: {len(starts)} windows of {args.sweep_count} jobs on "
          f"{args.sweep_nodes} nodes ...", flush=True)
    rows = []
    if args.processes > 1:
        with Pool(args.processes) as pool:
            for row in pool.imap(_sweep_window, work):
                rows.append(row)
                _print_sweep_row(row)
    else:
        for w in work:
            row = _sweep_window(w)
            rows.append(row)
            _print_sweep_row(row)
    lost = {p: round(sum(r[p]["lost_gpu_hours"] for r in rows), 1) for p in SWEEP_POLICIES}
    failing = {k: [r["start"] for r in rows if not r["goals"][k]]
               for k in rows[0]["goals"]} if rows else {}
    print("\nsweep: windows failing each goal:",
          {k: len(v) for k, v in failing.items()}, "of", len(rows))
    for k, v in failing.items():
        if v:
            print(f"  {k}: {v}")
    failing_v = {k: [r["start"] for r in rows if not r["goals_guarantee_first"][k]]
                 for k in rows[0]["goals_guarantee_first"]} if rows else {}
    print(f"  {VARIANT}: windows failing each goal:",
          {k: len(v) for k, v in failing_v.items()}, "of", len(rows))
    print("  GPU-hours lost to preemption, all windows:", lost)
    jain = {p: sum(r[p]["jain_index"] >= 0.9 for r in rows) for p in SWEEP_POLICIES}
    print("  windows with Jain's index >= 0.9:", jain)
    capped = {p: sum(r[p]["jain_index_capped"] >= 0.9 for r in rows) for p in SWEEP_POLICIES}
    print("  ... with received above the entitlement not counted against it:", capped)
    vs_easy = {p: sum(r[p]["jain_index"] >= r["easy"]["jain_index"] for r in rows)
               for p in SWEEP_POLICIES}
    print("  windows with Jain's index >= EASY's:", vs_easy)
    return {
        "setup": {"windows": len(rows), "jobs_per_window": args.sweep_count,
                  "nodes": args.sweep_nodes, "estimate": args.estimate},
        "windows_failing": failing,
        "windows_failing_guarantee_first": failing_v,
        "lost_gpu_hours_total": lost,
        "windows_jain>=0.9": jain,
        "windows_jain_capped>=0.9": capped,
        "windows_jain>=easy": vs_easy,
        "lost_total<=half_before": lost["gantry"] <= 0.5 * lost["before"],
        "sharing_incentive": fairness_by_policy(rows, SWEEP_POLICIES),
        "windows": rows,
    }


def alibaba(args: argparse.Namespace) -> dict:
    """The Alibaba openb week (``alibaba_openb_week.csv``) at each ``--alibaba-speedups``
    arrival compression on ``--alibaba-nodes`` nodes, every policy, goals per run.

    The trace has no tenants: its QoS classes (LS, BE, Burstable, Guaranteed) stand in, each
    guaranteed an equal part of the cluster and allowed to borrow up to half of it. Only
    the pods that finished within the week have a true duration (448 of 1,959; the rest are
    censored and skipped), and the week offers about 2
    busy GPUs, so arrivals are compressed until the cluster is contended. Fractional-GPU
    pods count as the whole GPUs in ``num_gpus`` (Gantry hands out whole GPUs)."""
    path = os.path.join(args.traces_dir, "alibaba_openb_week.csv")
    trace = load_trace(path, tenant_column="qos")
    base = [j for j in trace if j.num_gpus > 0]
    nodes = cluster(args.alibaba_nodes)
    total = sum(n.gpus for n in nodes)
    tenants = sorted({j.tenant for j in base})
    quotas = {t: Quota(t, total // len(tenants), total // 2) for t in tenants}
    rows = []
    print(f"\n  alibaba openb: {len(base)} pods on {args.alibaba_nodes} nodes ...", flush=True)
    for speedup in [float(x) for x in args.alibaba_speedups.split(",")]:
        jobs = [replace(j, submit_time=j.submit_time / speedup) for j in base]
        span = jobs[-1].submit_time - jobs[0].submit_time
        row = {"speedup": speedup,
               "offered_load": round(sum(j.duration * j.num_gpus for j in jobs)
                                     / max(span, 1.0) / total, 2),
               "arrival_span_h": round(span / 3600, 1)}
        private = private_slices(jobs, nodes, quotas, estimate=args.estimate)
        for name in SWEEP_POLICIES:
            row[name] = summary(run_one(jobs, nodes, quotas, name, args.estimate,
                                        args.before_ref, private=private))
        row["goals"] = goals_of(row)
        row["goals_guarantee_first"] = goals_of({**row, "gantry": row[VARIANT]})
        rows.append(row)
        _print_sweep_row({**row, "start": f"x{speedup:g}"})
    return {
        "setup": {"trace": "alibaba_openb_week.csv", "pods": len(base), "tenants": "qos",
                  "nodes": args.alibaba_nodes, "cluster_gpus": total,
                  "quotas": {t: [q.guaranteed_gpus, q.borrow_limit_gpus]
                             for t, q in quotas.items()},
                  "trace_rows_skipped": trace.skip_counts, "estimate": args.estimate},
        "runs_failing": {k: [r["speedup"] for r in rows if not r["goals"][k]]
                         for k in rows[0]["goals"]},
        "sharing_incentive": fairness_by_policy(rows, SWEEP_POLICIES),
        "runs": rows,
    }


def write_json(path: str, results: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=False)
    os.replace(tmp, path)


def _print_sweep_row(row: dict) -> None:
    def cell(p):
        r = row[p]
        return (f"{p}:{r['avg_jct_s'] / 3600:.2f}/{r['p95_wait_s'] / 3600:.2f}/"
                f"J{r['jain_index']:.2f}/L{r['lost_gpu_hours']:.0f}")

    bad = [k for k, v in row["goals"].items() if not v]
    print(f"  {row['start']!s:>6} " + " ".join(cell(p) for p in SWEEP_POLICIES)
          + (f"  MISSES {bad}" if bad else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
