#!/usr/bin/env python
"""Fair share by allocated or by used GPU-hours, on the traces (issue 26).

Runs without Django:  python bench/fairshare_used.py [--count 2000] [--out bench/results/fairshare_used.json]

Gantry's policy breaks ties between tenants by their attained service: GPU-seconds decayed
over a day. Counted as *allocated* (today), a tenant whose jobs hold GPUs they barely use
pays the same as one that keeps them busy; counted as *used* (utilization-weighted, what
the telemetry app measures), idle holding costs nothing in the fair share, busy holding
costs in full. This replays the same windows both ways and reports what changes.

**The traces have no utilization.** Assumed here (deterministic, seeded by name):
each tenant has an efficiency drawn uniformly from 0.25..0.95 (labs differ: some debug in
notebooks, some run tuned pipelines); each job's utilization is its tenant's efficiency
plus Gaussian noise (sd 0.15), clipped to 0.02..1.0, and one job in ten is a forgotten
one at 0.02 whatever its tenant. Jobs run as long as the trace says either way: only the
fair-share accounting differs (idle culling, which would shorten the idle jobs, is not
modelled). Philly: the reference window (jobs 20,000+) on 8 nodes of 8 GPUs, quotas from
the virtual clusters; Alibaba openb: tenants are the pods' QoS classes, on 2 nodes. The
clusters are smaller than checkpoint_sim's so that tenants contend: without a queue the
fair share decides nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from checkpoint_sim import alibaba, philly  # noqa: E402 - the same windows and quotas

from scheduling.policy.data import PolicyConfig  # noqa: E402
from scheduling.policy.schedule_pass import schedule  # noqa: E402
from scheduling.simulator import _Replay  # noqa: E402
from scheduling.traces import to_requests  # noqa: E402

TAU_S = 86_400.0


def seeded(name: str) -> random.Random:
    return random.Random(int(hashlib.sha256(name.encode()).hexdigest()[:16], 16))


def utilization_model(trace_jobs) -> tuple[dict[str, float], dict[str, float]]:
    """(tenant efficiency, job utilization by job id): the assumption stated above."""
    tenants = sorted({j.tenant for j in trace_jobs})
    efficiency = {t: round(seeded(f"tenant:{t}").uniform(0.25, 0.95), 3) for t in tenants}
    util = {}
    for j in trace_jobs:
        rng = seeded(f"job:{j.job_id}")
        if rng.random() < 0.1:
            util[str(j.job_id)] = 0.02
        else:
            util[str(j.job_id)] = min(1.0, max(0.02, rng.gauss(efficiency[j.tenant], 0.15)))
    return efficiency, util


class UsedShareReplay(_Replay):
    """The simulator's replay with the fair-share history counting used GPU-seconds: after
    the base class integrates each tenant's running GPUs, the idle part is taken back out
    with the same exponential-decay integral."""

    util: dict[str, float] = {}

    def advance(self, to: float) -> None:
        dt = to - self.t
        idle = defaultdict(float)
        if dt > 0:
            for jid, rj in self.running.items():
                idle[rj.request.tenant] += rj.request.total_gpus * (1 - self.util[jid])
        super().advance(to)
        if dt <= 0:
            return
        factor = self.usage_tau_s * (1 - math.exp(-dt / self.usage_tau_s))
        for tenant, g in idle.items():
            self.usage[tenant] = max(0.0, self.usage.get(tenant, 0.0) - g * factor)


def simulate(trace_jobs, nodes, quotas, util, counting: str) -> dict:
    t0 = time.perf_counter()
    reqs = to_requests(trace_jobs, nodes, estimate="realistic", seed=0)
    reqs.sort(key=lambda x: (x[0].submit_time, x[0].id))
    true_dur = {str(tj.job_id): tj.duration for tj in trace_jobs}
    cfg = PolicyConfig(usage_window_s=TAU_S)

    def decide(snap, now):
        return schedule(snap, now, cfg)

    cls = UsedShareReplay if counting == "used" else _Replay
    replay = cls(reqs, nodes, quotas, decide, {}, true_dur, TAU_S, False)
    replay.util = util
    replay.run(0.0, None)
    summary = replay.summary()
    keys = ("completed", "stuck", "avg_jct_s", "p95_jct_s", "avg_wait_s", "p95_wait_s",
            "jain_index", "preemptions", "quota_violations", "capacity_violations")
    out = {k: summary.get(k) for k in keys}
    out["tenants"] = {
        t: {k: row.get(k) for k in ("jobs_completed", "gpu_hours", "avg_wait_s", "avg_jct_s")}
        for t, row in replay.tenant_rows().items()
    }
    # The decayed history the policy saw at the end: lower when counting used GPU-hours.
    out["fair_share_history_gpu_hours"] = round(sum(replay.usage.values()) / 3600, 1)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def compare(allocated: dict, used: dict, efficiency: dict) -> dict:
    """What counting used GPU-hours changed, overall and for efficient vs wasteful labs."""
    ranked = sorted(efficiency, key=efficiency.get)
    half = max(1, len(ranked) // 2)
    groups = {"least_efficient_half": ranked[:half], "most_efficient_half": ranked[-half:]}
    out = {
        "avg_jct_change_pct": _pct(allocated["avg_jct_s"], used["avg_jct_s"]),
        "avg_wait_change_pct": _pct(allocated["avg_wait_s"], used["avg_wait_s"]),
        "p95_wait_change_pct": _pct(allocated["p95_wait_s"], used["p95_wait_s"]),
    }
    for name, tenants in groups.items():
        waits = {}
        for label, run in (("allocated", allocated), ("used", used)):
            rows = [run["tenants"][t] for t in tenants if t in run["tenants"]]
            rows = [r for r in rows if r["jobs_completed"]]
            waits[label] = (
                sum(r["avg_wait_s"] * r["jobs_completed"] for r in rows)
                / max(1, sum(r["jobs_completed"] for r in rows))
            )
        out[name] = {
            "tenants": tenants,
            "mean_efficiency": round(statistics.fmean(efficiency[t] for t in tenants), 3),
            "avg_wait_s_allocated": round(waits["allocated"], 1),
            "avg_wait_s_used": round(waits["used"], 1),
            "avg_wait_change_pct": _pct(waits["allocated"], waits["used"]),
        }
    return out


def _pct(before, after):
    if not before:
        return None
    return round(100 * (after - before) / before, 1)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fairshare_used.json"))
    p.add_argument("--count", type=int, default=2000, help="jobs per trace window")
    p.add_argument("--philly-start", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=8, help="Philly: nodes of 8 GPUs")
    p.add_argument("--alibaba-start", type=int, default=0)
    p.add_argument("--alibaba-nodes", type=int, default=2)
    # checkpoint_sim.alibaba compresses arrivals by this; 1: the week as recorded.
    p.add_argument("--alibaba-speedup", type=float, default=1.0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    results = {"setup": {k: v for k, v in vars(args).items() if k != "out"}, "traces": {}}
    results["assumption"] = (
        "traces carry no utilization: tenant efficiency ~ U(0.25, 0.95), job utilization = "
        "efficiency + N(0, 0.15) clipped to [0.02, 1], 10% of jobs forgotten at 0.02"
    )
    for trace_name, load in (("philly", philly), ("alibaba_openb", alibaba)):
        jobs, nodes, quotas = load(args)
        efficiency, util = utilization_model(jobs)
        used_share = sum(util[str(j.job_id)] * j.duration * max(j.num_gpus, 1) for j in jobs)
        offered = sum(j.duration * max(j.num_gpus, 1) for j in jobs)
        per = {
            "jobs": len(jobs),
            "cluster_gpus": sum(n.gpus for n in nodes),
            "tenants": len(quotas),
            "offered_gpu_hours": round(offered / 3600, 1),
            "assumed_used_gpu_hours": round(used_share / 3600, 1),
            "tenant_efficiency": efficiency,
        }
        for counting in ("allocated", "used"):
            print(f"{trace_name}: fair share counting {counting} GPU-hours ...", flush=True)
            per[counting] = simulate(jobs, nodes, quotas, util, counting)
            print("   ", {k: v for k, v in per[counting].items() if k != "tenants"}, flush=True)
        per["difference"] = compare(per["allocated"], per["used"], efficiency)
        print("    difference:", json.dumps(per["difference"]), flush=True)
        results["traces"][trace_name] = per
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=2)
        fh.write("\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
