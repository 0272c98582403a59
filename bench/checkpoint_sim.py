#!/usr/bin/env python
"""Checkpoint-aware preemption in the trace simulator (issue 24).

Runs without Django:  python bench/checkpoint_sim.py [--out bench/results/checkpoint_sim.json]

Every job checkpoints every ``--every-min`` minutes of run time (a sweep over several
intervals); a preempted job keeps what its last complete checkpoint holds and loses the run
since (periodic checkpoints only: the save window's extra checkpoint on preemption is not
modelled, so the losses are an upper bound). Three policies, same jobs, nodes, quotas and
estimates, all with the live admission's config (immediate reclaim, ``LIVE_CONFIG``):

* ``no_preemption``: the same policy with preemption off;
* ``current``: victims lowest priority first, then least GPU x time run (today's choice,
  blind to checkpoints);
* ``checkpoint_aware``: victims least work lost first (GPU-seconds since their last
  checkpoint: ``Snapshot.work_lost``, what admission computes live from the catalog).

Reported per trace and interval: GPU-hours lost to preemption, average / p95 JCT, average
wait including lost run time, preemptions. Traces: the Philly reference window (jobs 20,000+
on 32 nodes of 8 GPUs, quotas from the virtual clusters) and a window of Alibaba's openb
week (tenants = the pods' QoS class, each guaranteed an equal share and allowed to borrow
half the cluster; fractional-GPU pods count as one GPU; its 448 complete GPU pods offer ~2
busy GPUs over the week, so arrivals are compressed ``--alibaba-speedup`` (20) times onto
4 nodes to contend at all).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scheduling.policy.data import PolicyConfig, Quota  # noqa: E402 - path set up above
from scheduling.policy.schedule_pass import schedule  # noqa: E402
from scheduling.simulator import _Replay  # noqa: E402
from scheduling.traces import TraceJob, load_trace, load_vc_nodes, to_requests, window  # noqa: E402

# The shared traces: beside the checkout, or where GANTRY_TRACES says.
TRACES = os.environ.get("GANTRY_TRACES", os.path.join(os.path.dirname(ROOT), "shared", "traces"))
LIVE = dict(  # scheduling/admission.py's POLICY (no Django here to import it)
    min_runtime_before_preempt_s=0.0,
    reclaim_after_wait_s=0.0,
    reclaim_work_ratio=float("inf"),
    reclaim_min_remaining_s=0.0,
)
POLICIES = ("no_preemption", "current", "checkpoint_aware")


class CheckpointReplay(_Replay):
    """The simulator's replay where a preempted attempt keeps its last checkpoint."""

    every_s = 0.0

    def preempt(self, preempt):
        t, c = self.t, self.every_s
        for jid, _why in preempt:
            rj = self.running.pop(jid)
            j = self.jobs[jid]
            j.epoch += 1
            j.preemptions += 1
            self.preemptions += 1
            ran = t - rj.start_time
            kept = (ran // c) * c if c > 0 else 0.0
            j.progress += kept
            j.lost_s += ran - kept
            j.lost_gpu_s += (ran - kept) * rj.request.total_gpus
            j.queued_since = t
            self.pending[jid] = j.req
            self.run_g[j.req.tenant] -= j.req.total_gpus


def policy(name: str, every_s: float):
    if name == "no_preemption":
        cfg = PolicyConfig(preemption=False, **LIVE)
    else:
        cfg = PolicyConfig(checkpoint_aware=name == "checkpoint_aware", **LIVE)

    def decide(snap, now):
        if cfg.checkpoint_aware:
            # An attempt starts from a checkpoint, so it loses only the run since the last
            # multiple of the interval.
            snap.work_lost = {
                rj.request.id: rj.request.total_gpus * ((now - rj.start_time) % every_s)
                for rj in snap.running
            }
        return schedule(snap, now, cfg)

    return decide


def simulate(trace_jobs, nodes, quotas, name: str, every_s: float) -> dict:
    t0 = time.perf_counter()
    reqs = to_requests(trace_jobs, nodes, estimate="realistic", seed=0)
    reqs.sort(key=lambda x: (x[0].submit_time, x[0].id))
    true_dur = {str(tj.job_id): tj.duration for tj in trace_jobs}
    jobs: dict = {}
    replay = CheckpointReplay(
        reqs, nodes, quotas, policy(name, every_s), jobs, true_dur, 86_400.0, True
    )
    replay.every_s = every_s
    replay.run(0.0, None)
    s = replay.summary()
    keys = ("lost_gpu_hours", "avg_jct_s", "p95_jct_s", "avg_wait_incl_lost_s", "preemptions",
            "preempted_jobs", "completed", "stuck", "quota_violations", "capacity_violations")
    out = {k: s[k] for k in keys}
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def cluster(n: int):
    from scheduling.policy.data import Node

    return [Node(f"node-{i:04d}", 8, 64, 512_000, "") for i in range(n)]


def philly(args):
    trace = load_trace(os.path.join(TRACES, "philly_vc.csv.gz"))
    vc = load_vc_nodes(os.path.join(TRACES, "philly_vc_nodes.csv"))
    jobs = window(trace, args.philly_start, args.count)
    nodes = cluster(args.nodes)
    total = sum(n.gpus for n in nodes)
    vc_total = sum(vc.values()) or 1
    tenants = sorted({j.tenant for j in jobs} | set(vc))
    quotas = {t: Quota(t, total * vc.get(t, 0) // vc_total, total // 2) for t in tenants}
    return jobs, nodes, quotas


def alibaba(args):
    path = os.path.join(TRACES, "alibaba_openb_week.csv")
    trace = [
        TraceJob(j.job_id, j.submit_time / args.alibaba_speedup, j.duration, j.num_gpus, j.tenant)
        for j in load_trace(path, tenant_column="qos")
        if j.num_gpus > 0
    ]
    jobs = window(trace, args.alibaba_start, args.count)
    nodes = cluster(args.alibaba_nodes)
    total = sum(n.gpus for n in nodes)
    tenants = sorted({j.tenant for j in jobs})
    quotas = {t: Quota(t, total // len(tenants), total // 2) for t in tenants}
    return jobs, nodes, quotas


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "checkpoint_sim.json"))
    p.add_argument("--count", type=int, default=5000, help="jobs per trace window")
    p.add_argument("--philly-start", type=int, default=20_000)
    p.add_argument("--nodes", type=int, default=32, help="Philly: nodes of 8 GPUs")
    p.add_argument("--alibaba-start", type=int, default=0)
    p.add_argument("--alibaba-nodes", type=int, default=4)
    # The week offers ~2 busy GPUs on average: arrivals compressed 20x make the 32 GPUs
    # contended (~40 offered), or nothing is ever preempted.
    p.add_argument("--alibaba-speedup", type=float, default=20.0)
    p.add_argument("--every-min", type=float, nargs="+", default=[10.0, 30.0, 60.0])
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    results = {"setup": {k: v for k, v in vars(args).items() if k != "out"}, "traces": {}}
    for trace_name, load in (("philly", philly), ("alibaba_openb", alibaba)):
        jobs, nodes, quotas = load(args)
        per = results["traces"][trace_name] = {
            "jobs": len(jobs),
            "cluster_gpus": sum(n.gpus for n in nodes),
            "tenants": len(quotas),
            "offered_gpu_hours": round(sum(j.duration * max(j.num_gpus, 1) for j in jobs) / 3600, 1),
            "every_min": {},
        }
        print(f"{trace_name}: no_preemption ...", flush=True)
        baseline = simulate(jobs, nodes, quotas, "no_preemption", 3600.0)  # no interval matters
        print("   ", baseline, flush=True)
        for every in args.every_min:
            row = per["every_min"][str(every)] = {"no_preemption": baseline}
            for name in POLICIES[1:]:
                print(f"{trace_name} every {every:g} min: {name} ...", flush=True)
                row[name] = simulate(jobs, nodes, quotas, name, every * 60)
                print("   ", row[name], flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
