#!/usr/bin/env python
"""Issue 40's goals for the scheduler on three traces, for a sweep of the policy's parameters.

Runs without Django:  python bench/scheduler_fairness.py [--out bench/results/scheduler_fairness.json]

Traces (same estimates for every policy: realistic, the user-estimate model where the trace
has no requested time): Philly windows of 1,000 jobs on 8 nodes of 8 GPUs with quotas from
the virtual clusters (``--philly-starts``; a subset, listed in the JSON, because the full 82
windows x every configuration do not fit a shared 2-core machine), the Alibaba openb week
compressed ``--alibaba-speedups`` times onto 4 nodes (QoS classes as tenants), and the
synthetic held-out-shaped trace (``scheduling.traces.synthetic_trace``, ``--synthetic-seeds``,
1,000 jobs on 8 nodes, at the offered loads ``--synthetic-loads``: 1.1 times the cluster is
trace ``synthetic``, the others ``synthetic_load<L>``). Per window: EASY, LAS (the size-blind reference, perfect
checkpoints) and each Gantry configuration of the sweep, all with the sharing incentive
(``scheduling.sim_metrics``: the private slices are replayed once per window).

Goals (issue 40), per trace and configuration:

* ``rho``: rho <= 1 for at least 95% of the tenant-windows with 10 or more jobs, none above 1.5;
* ``geo_jct<=las`` / ``geo_p95<=las``: geometric mean over the windows of avg JCT / EASY's
  and of p95 wait / EASY's no worse than LAS's (p95 waits below a minute count as a minute,
  so a window where both wait seconds does not swing the mean);
* ``windows<=1.10easy``: no window with avg JCT or p95 wait above 1.10 x EASY's;
* ``guarantee_fit_p95<=promise``: in every window the p95 wait of guarantee-fit jobs is at
  most the promise (``--promise-s``, 15 minutes; the reclaim window is a parameter below it:
  a victim must also have run ``min_runtime_before_preempt_s``);
* 0 quota violations (always checked).

The sweep varies the reclaim window (``--reclaims``; also the least a job runs before it
may be preempted), the size ranking's weight
(``--size-weights``), the attained-service thresholds (``--las-scales`` x 1 and 10
GPU-hours) and where guaranteed work goes (``--orders``: ``gbr``, guarantees before ranking,
where a guaranteed job that cannot start holds the reservation; ``gf``, only guaranteed jobs
that fit the free capacity go first, the rest by rank: ``_gf``), with borrowed and own work
preempted by attained service (which, like the LAS reference, assumes jobs resume from
checkpoints: ``resume``), each also with ``rounded_up_slice`` (``_rounded``: each tenant's
guarantee rounded up to its widest job running or waiting, as the private slice is); one row
runs without checkpoints (preempted work lost, no LAS preemption), one with
``PolicyConfig()``'s defaults (guarantees before ranking, no reclaim, no LAS preemption) and
one with issue 28's. Windows run in ``--procs`` processes.

Per trace, ``frontier`` lists every configuration's sharing incentive beside its efficiency
(rho share and largest rho; geometric means and worst window over LAS's and EASY's), best
rho first, and ``configs_meeting`` which configurations meet each goal: where no
configuration meets them together, the frontier shows what one costs in the other.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from simulate import TRACES, cluster, philly_quotas, write_json  # noqa: E402

from scheduling import PolicyConfig, Quota, load_trace, load_vc_nodes, run_simulation, window  # noqa: E402
from scheduling.sim_metrics import RHO_MIN_JOBS, trace_fairness  # noqa: E402
from scheduling.simulator import private_slices  # noqa: E402
from scheduling.traces import synthetic_trace  # noqa: E402

P95_FLOOR_S = 60.0
WINDOW_LIMIT = 1.10
LAS_TH = (3600.0, 36_000.0)


ORDERS = {  # --orders: where guaranteed work goes (suffix of the configuration's name)
    "gbr": ("", {"guarantees_before_rank": True}),
    "gf": ("_gf", {"guarantees_before_rank": False, "guarantee_first": True}),
}


def configs(
    reclaims: list[float], scales: list[float], size_weights: list[float],
    rounded_up: bool = True, orders: tuple[str, ...] = ("gbr",),
) -> dict[str, tuple[PolicyConfig, bool]]:
    """name -> (PolicyConfig, resume). Reclaim without the issue-28 guards (any borrowed job,
    least work lost first), as live admission reclaims; the reclaim window W is also the
    least a job runs before it may be preempted (``min_runtime_before_preempt_s``), so a
    guarantee-fit job waits about W at most for borrowed GPUs."""
    out: dict[str, tuple[PolicyConfig, bool]] = {}
    base = PolicyConfig(
        reclaim_work_ratio=math.inf, reclaim_min_remaining_s=0.0, checkpoint_aware=True
    )
    for order in orders:
        suffix, placed = ORDERS[order]
        for w in reclaims:
            for k in scales:
                for sw in size_weights:
                    cfg = replace(
                        base,
                        reclaim_after_wait_s=w,
                        min_runtime_before_preempt_s=w,
                        las_preempt_borrowed=True,
                        las_thresholds_gpu_s=tuple(k * x for x in LAS_TH),
                        size_weight=sw,
                        **placed,
                    )
                    name = f"W{w:g}_las{k:g}_size{sw:g}{suffix}"
                    out[name] = (cfg, True)
                    if rounded_up:  # the same with each guarantee rounded up to the widest job
                        out[f"{name}_rounded"] = (replace(cfg, rounded_up_slice=True), True)
    mid = reclaims[len(reclaims) // 2]
    out[f"W{mid:g}_no_checkpoints"] = (
        replace(base, reclaim_after_wait_s=mid, min_runtime_before_preempt_s=mid),
        False,
    )
    out["defaults"] = (PolicyConfig(), False)  # guarantees before rank, nothing else
    out["issue28_defaults"] = (replace(PolicyConfig(), guarantees_before_rank=False), False)
    return out


def run_window(jobs, nodes, quotas, cfgs) -> dict:
    """One window under EASY, LAS and every configuration, with the private slices."""
    private = private_slices(jobs, nodes, quotas)
    row = {}
    for name in ("easy", "las"):
        row[name] = slim(run_simulation(jobs, nodes, quotas, name, private=private))
    for name, (cfg, resume) in cfgs.items():
        row[name] = slim(
            run_simulation(
                jobs, nodes, quotas, "gantry", config=cfg, resume=resume, private=private
            )
        )
    return row


def slim(r: dict) -> dict:
    keys = (
        "avg_jct_s",
        "p95_wait_s",
        "lost_gpu_hours",
        "quota_violations",
        "preemptions",
        "jain_index",
        "jain_index_capped",
        "completed",
    )
    out = {k: r[k] for k in keys}
    out["fairness"] = r["fairness"]
    out["rho"] = {
        t: [x["rho"], x["jobs"], x["slice_gpus"]]
        for t, x in r["sharing"].items()
        if x["rho"] is not None
    }
    return out


def ratios(row: dict, name: str) -> tuple[float, float]:
    e, g = row["easy"], row[name]
    jct = g["avg_jct_s"] / e["avg_jct_s"] if e["avg_jct_s"] else 1.0
    p95 = max(g["p95_wait_s"], P95_FLOOR_S) / max(e["p95_wait_s"], P95_FLOOR_S)
    return jct, p95


def geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 1.0


def trace_goals(rows: list[dict], cfgs: dict, promise_s: float) -> dict:
    """Per policy: the trace summary and every goal."""
    out = {}
    las_j = geo([ratios(r, "las")[0] for r in rows])
    las_p = geo([ratios(r, "las")[1] for r in rows])
    for name in ("easy", "las", *cfgs):
        rs = [ratios(r, name) for r in rows]
        fair = trace_fairness([r[name]["fairness"] for r in rows])
        gj, gp = geo([x[0] for x in rs]), geo([x[1] for x in rs])
        worst = max((max(x) for x in rs), default=1.0)
        fit_worst = fair["guarantee_fit_p95_wait_s_worst_window"]
        summary = {
            "geo_jct_over_easy": round(gj, 3),
            "geo_p95_wait_over_easy": round(gp, 3),
            "worst_window_over_easy": round(worst, 3),
            "windows_over_1.10_easy": sum(1 for x in rs if max(x) > WINDOW_LIMIT),
            "lost_gpu_hours": round(sum(r[name]["lost_gpu_hours"] for r in rows), 1),
            "quota_violations": sum(r[name]["quota_violations"] for r in rows),
            **fair,
        }
        summary["goals"] = {
            "rho": fair["rho_goals_met"],
            "geo_jct<=las": gj <= las_j + 1e-9,
            "geo_p95<=las": gp <= las_p + 1e-9,
            "windows<=1.10easy": worst <= WINDOW_LIMIT,
            "guarantee_fit_p95<=promise": fit_worst <= promise_s,
            "quota_violations==0": summary["quota_violations"] == 0,
        }
        summary["all_goals"] = all(summary["goals"].values())
        out[name] = summary
    return out


def frontier(summary: dict, cfgs: dict) -> dict:
    """Each configuration's sharing incentive beside its efficiency, best rho first (ties:
    lower p95 over LAS's), and which configurations meet each goal."""
    las = summary["las"]
    rows = []
    for name in cfgs:
        s = summary[name]
        rows.append({
            "config": name,
            "share_rho<=1": s["share_rho<=1"],
            "max_rho": s["max_rho"],
            "geo_jct_over_las": round(s["geo_jct_over_easy"] / las["geo_jct_over_easy"], 3),
            "geo_p95_over_las": round(
                s["geo_p95_wait_over_easy"] / las["geo_p95_wait_over_easy"], 3),
            "worst_window_over_easy": s["worst_window_over_easy"],
            "guarantee_fit_p95_wait_s_worst_window":
                s["guarantee_fit_p95_wait_s_worst_window"],
        })
    rows.sort(key=lambda r: (-r["share_rho<=1"], r["geo_p95_over_las"]))
    goals = next(iter(summary.values()))["goals"]
    meeting = {goal: [n for n in cfgs if summary[n]["goals"][goal]] for goal in goals}
    efficiency = ("geo_jct<=las", "geo_p95<=las", "windows<=1.10easy")
    meeting["efficiency (all three)"] = [
        n for n in cfgs if all(summary[n]["goals"][g] for g in efficiency)]
    return {"frontier": rows, "configs_meeting": meeting}


def _run_case(case) -> tuple[str, dict]:
    trace, label, jobs, nodes, quotas, cfgs = case
    w0 = time.perf_counter()
    row = run_window(jobs, nodes, quotas, cfgs)
    row["window"] = label
    print(f"  {trace} {label}: {time.perf_counter() - w0:.1f} s", flush=True)
    return trace, row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--out", default=os.path.join(ROOT, "bench", "results", "scheduler_fairness.json")
    )
    ap.add_argument("--traces-dir", default=TRACES)
    ap.add_argument(
        "--philly-starts", default="0,8000,16000,24000,32000,40000,48000,56000,64000,72000"
    )
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--alibaba-speedups", default="10,20,40")
    ap.add_argument("--synthetic-seeds", default="0,1,2,3,4,5")
    ap.add_argument("--synthetic-loads", default="1.1,0.7",
                    help="offered GPU time over the cluster's: the first is trace 'synthetic', "
                    "the others 'synthetic_load<L>'")
    ap.add_argument("--reclaims", default="0,300", help="reclaim windows (s)")
    ap.add_argument("--las-scales", default="0.5,1,2", help="x 1 and 10 GPU-hours")
    ap.add_argument("--size-weights", default="0.1,0.25,0.5")
    ap.add_argument("--orders", default="gbr,gf", help="where guaranteed work goes: "
                    + ", ".join(ORDERS))
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                    help="windows replayed in parallel")
    ap.add_argument(
        "--promise-s",
        type=float,
        default=900.0,
        help="the guarantee's promise: p95 guarantee-fit wait in every window",
    )
    args = ap.parse_args(argv)
    cfgs = configs(
        [float(x) for x in args.reclaims.split(",")],
        [float(x) for x in args.las_scales.split(",")],
        [float(x) for x in args.size_weights.split(",")],
        orders=tuple(x for x in args.orders.split(",") if x),
    )
    t0 = time.perf_counter()
    traces: dict[str, list[tuple[str, list, list, dict]]] = {}
    philly = load_trace(os.path.join(args.traces_dir, "philly_vc.csv.gz"))
    vc = load_vc_nodes(os.path.join(args.traces_dir, "philly_vc_nodes.csv"))
    starts = [int(x) for x in args.philly_starts.split(",") if x]
    nodes = cluster(args.nodes)
    traces["philly"] = []
    for s in starts:
        jobs = window(philly, s, args.count)
        traces["philly"].append((str(s), jobs, nodes, philly_quotas(jobs, nodes, vc)))
    ali = [
        j
        for j in load_trace(
            os.path.join(args.traces_dir, "alibaba_openb_week.csv"), tenant_column="qos"
        )
        if j.num_gpus > 0
    ]
    ali_nodes = cluster(4)
    tenants = sorted({j.tenant for j in ali})
    ali_q = {t: Quota(t, 32 // len(tenants), 16) for t in tenants}
    traces["alibaba"] = [
        (f"x{k:g}", [replace(j, submit_time=j.submit_time / k) for j in ali], ali_nodes, ali_q)
        for k in (float(x) for x in args.alibaba_speedups.split(",") if x)
    ]
    for k, load in enumerate(float(x) for x in args.synthetic_loads.split(",") if x):
        name = "synthetic" if k == 0 else f"synthetic_load{load:g}"
        traces[name] = []
        for seed in (int(x) for x in args.synthetic_seeds.split(",") if x):
            jobs, q = synthetic_trace(args.count, seed=seed, cluster_gpus=8 * args.nodes,
                                      load=load)
            traces[name].append((f"seed{seed}", jobs, nodes, q))
    results: dict = {
        "generated_by": "bench/scheduler_fairness.py",
        "estimate": "realistic",
        "subset_note": "Philly: the windows listed (1,000 jobs each), not all 82: the sweep "
        "x 82 windows does not fit this shared 2-core machine's budget",
        "setup": {
            "philly_window_starts": starts,
            "jobs_per_window": args.count,
            "nodes": args.nodes,
            "alibaba_speedups": args.alibaba_speedups,
            "synthetic_seeds": args.synthetic_seeds,
            "synthetic_loads": args.synthetic_loads,
            "rho_min_jobs": RHO_MIN_JOBS,
            "p95_floor_s": P95_FLOOR_S,
            "guarantee_promise_s": args.promise_s,
            "configs": {
                n: {
                    "reclaim_after_wait_s": c.reclaim_after_wait_s,
                    "min_runtime_before_preempt_s": c.min_runtime_before_preempt_s,
                    "size_weight": c.size_weight,
                    "las_thresholds_gpu_s": list(c.las_thresholds_gpu_s),
                    "las_preempt_borrowed": c.las_preempt_borrowed,
                    "guarantees_before_rank": c.guarantees_before_rank,
                    "guarantee_first": c.guarantee_first,
                    "rounded_up_slice": c.rounded_up_slice,
                    "resume_after_preemption": resume,
                }
                for n, (c, resume) in cfgs.items()
            },
        },
        "traces": {},
    }
    work = [(trace, label, jobs, nds, quotas, cfgs)
            for trace, cases in traces.items() for label, jobs, nds, quotas in cases]
    if args.procs > 1:
        with multiprocessing.get_context("fork").Pool(args.procs) as pool:
            done = pool.map(_run_case, work, chunksize=1)
    else:
        done = [_run_case(case) for case in work]
    for trace in traces:
        rows = [row for t, row in done if t == trace]  # (in the windows' order)
        summary = trace_goals(rows, cfgs, args.promise_s)
        results["traces"][trace] = {"summary": summary, **frontier(summary, cfgs),
                                    "windows": rows}
    passing = [
        n for n in cfgs if all(results["traces"][t]["summary"][n]["all_goals"] for t in traces)
    ]
    results["configs_meeting_every_goal_on_every_trace"] = passing
    results["bench_wall_s"] = round(time.perf_counter() - t0, 1)
    write_json(args.out, results)
    print_summary(results)
    print(f"wrote {args.out}")
    return 0


def print_summary(results: dict) -> None:
    for trace, res in results["traces"].items():
        print(
            f"\n{trace}: policy  geoJCT  geoP95  worst  rho<=1  maxRho  fitP95(worst)  lostGPUh  "
            "failing goals"
        )
        for name, s in res["summary"].items():
            bad = [k for k, v in s["goals"].items() if not v]
            print(
                f"  {name:24s} {s['geo_jct_over_easy']:6.3f} {s['geo_p95_wait_over_easy']:7.3f} "
                f"{s['worst_window_over_easy']:6.2f} {s['share_rho<=1']:7.3f} "
                f"{s['max_rho'] if s['max_rho'] is not None else '-':>7} "
                f"{s['guarantee_fit_p95_wait_s_worst_window']:>10} {s['lost_gpu_hours']:>9} "
                f"{bad}"
            )


if __name__ == "__main__":
    sys.exit(main())
