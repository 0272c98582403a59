#!/usr/bin/env python
"""Record what ``schedule()`` decides, pass by pass, so a refactor can prove it changes nothing.

Every pass of several replays is hashed (admissions with placements, preemptions with their
reasons, every waiting job's code, message, position and estimated start, the reservation):
Philly trace windows and the Alibaba week under the configurations the benchmarks run
(defaults, live admission's reclaim at once, checkpoint-aware victims, EASY, no backfill,
the tail guards, guarantee first, the fair-share ceiling), plus seeded random snapshots
with priorities, GPU models, CPU/memory/job caps and checkpoint-aware work lost, which
exercise preemption far more than the traces do, and the micro-benchmark's trace-shaped
pass (``bench/scheduler_micro.py``). Runs without Django:

    python bench/scheduler_decisions.py --out /tmp/before.txt   # on the old code (34,612 passes)
    python bench/scheduler_decisions.py --out /tmp/after.txt    # on the new code
    cmp /tmp/before.txt /tmp/after.txt

One line per pass: case, pass number, admitted, preempted, sha256 of the whole decision.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from scheduler_micro import trace_shaped_snapshot  # noqa: E402

from scheduling import (  # noqa: E402 - path set up above, no Django needed
    JobRequest,
    Node,
    PolicyConfig,
    Quota,
    RunningJob,
    Snapshot,
    load_trace,
    load_vc_nodes,
    run_simulation,
    schedule,
    window,
)

TRACES = os.environ.get("GANTRY_TRACES", os.path.join(os.path.dirname(ROOT), "shared", "traces"))
LIVE = PolicyConfig(min_runtime_before_preempt_s=0.0, reclaim_after_wait_s=0.0,
                    reclaim_work_ratio=float("inf"), reclaim_min_remaining_s=0.0)
CONFIGS = {
    "default": PolicyConfig(),
    "live": LIVE,
    "live_checkpoint_aware": replace(LIVE, checkpoint_aware=True),
    "guarded_reclaim": PolicyConfig(reclaim_after_wait_s=1800.0, min_runtime_before_preempt_s=300.0),
    "easy": PolicyConfig(fair_share=False, preemption=False),
    "no_backfill": replace(LIVE, backfill=False),
    "fifo_head": PolicyConfig(fifo_head=True, fifo_age_s=43_200.0),
    "tail_guard": PolicyConfig(fifo_tail_fraction=0.05),
    "guarantee_first": PolicyConfig(guarantee_first=True, guarantee_boost_s=1800.0),
    "fair_ceiling": replace(LIVE, fair_share_s=3.6e7),
}


def digest(decision) -> str:
    waiting = [[jid, *w] for jid, w in decision.waiting.items()]
    res = decision.reservation
    res = None if res is None else [res.job_id, res.start, sorted(res.placement.items())]
    text = json.dumps([decision.admit, decision.preempt, waiting, res])
    return hashlib.sha256(text.encode()).hexdigest()


class Recorder:
    def __init__(self, out) -> None:
        self.out = out
        self.passes = 0
        self.with_preemption = 0

    def pass_(self, case: str, n: int, decision) -> None:
        self.passes += 1
        self.with_preemption += bool(decision.preempt)
        self.out.write(f"{case} {n} {len(decision.admit)} {len(decision.preempt)} "
                       f"{digest(decision)}\n")

    def replay(self, case: str, jobs, nodes, quotas, cfg: PolicyConfig) -> None:
        count = [0]

        def policy(snap, now):
            d = schedule(snap, now, cfg)
            count[0] += 1
            self.pass_(case, count[0], d)
            return d

        run_simulation(jobs, nodes, quotas, policy, keep_jobs=False, resume=True)


def random_snapshot(rng: random.Random) -> tuple[Snapshot, float]:
    """A small, contended cluster: priorities, GPU models, caps, borrowed running jobs."""
    models = rng.choice([[""], ["", "a100"], ["a100", "h100"]])
    nodes = [Node(f"n{i}", rng.choice([2, 4, 8]), rng.choice([16, 64]),
                  rng.choice([64_000, 512_000]), rng.choice(models))
             for i in range(rng.randint(1, 8))]
    tenants = [f"t{i}" for i in range(rng.randint(1, 5))]
    total = sum(n.gpus for n in nodes)
    quotas = {t: Quota(t, rng.randint(0, total // 2), rng.randint(0, total),
                       rng.choice([None, None, 48.0]), rng.choice([None, None, 400_000]),
                       rng.choice([None, None, 1, 3]), rng.choice([1.0, 2.0]))
              for t in tenants}
    now = 10_000.0
    free = {n.name: [n.gpus, float(n.cpus), n.memory_mb] for n in nodes}

    def request(i: int) -> JobRequest:
        gpw = rng.choice([0, 1, 1, 1, 2, 4, 8])
        return JobRequest(f"j{i}", rng.choice(tenants + ["nobody"] * (rng.random() < 0.05)),
                          rng.choice([0, 0, 0, 1, 2]), rng.uniform(0, now),
                          rng.choice([1, 1, 1, 2, 3]), gpw, rng.choice([1.0, 4.0, 8.0]) * max(gpw, 1),
                          rng.choice([8_000, 32_000]) * max(gpw, 1),
                          rng.choice([None, 600.0, 3600.0, 86_400.0, rng.uniform(60, 20_000)]),
                          rng.choice(models) if rng.random() < 0.3 else "")

    running, pending, work_lost = [], [], {}
    for i in range(rng.randint(0, 25)):
        r = request(i)
        if r.tenant not in quotas:
            continue
        placement = {}
        for _ in range(r.workers):
            fits = [n for n in nodes if (not r.gpu_model or n.gpu_model == r.gpu_model)
                    and free[n.name][0] >= r.gpus_per_worker
                    and free[n.name][1] >= r.cpus_per_worker
                    and free[n.name][2] >= r.memory_mb_per_worker]
            if not fits:
                break
            n = rng.choice(fits)
            free[n.name][0] -= r.gpus_per_worker
            free[n.name][1] -= r.cpus_per_worker
            free[n.name][2] -= r.memory_mb_per_worker
            placement[n.name] = placement.get(n.name, 0) + 1
        else:
            start = rng.uniform(r.submit_time, now)
            running.append(RunningJob(r, placement, start))
            if rng.random() < 0.5:
                work_lost[r.id] = rng.uniform(0, (now - start) * r.total_gpus)
    pending = [request(100 + i) for i in range(rng.randint(1, 40))]
    history = {t: rng.uniform(0, 1e6) for t in tenants if rng.random() < 0.7}
    entitled = {t: rng.uniform(0, 1e6) for t in tenants if rng.random() < 0.7}
    return Snapshot(nodes, quotas, running, pending, history, entitled, work_lost), now


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--traces-dir", default=TRACES)
    ap.add_argument("--count", type=int, default=400, help="jobs per Philly window")
    ap.add_argument("--starts", default="0,20000,60000", help="Philly window starts")
    ap.add_argument("--random", type=int, default=1000, help="random snapshots per config")
    ap.add_argument("--cases", default="philly,alibaba,trace_shaped,random")
    args = ap.parse_args(argv)
    cases = set(args.cases.split(","))
    with open(args.out, "w") as out:
        rec = Recorder(out)
        if "philly" in cases:
            philly(rec, args)
        if "alibaba" in cases:
            alibaba(rec, args)
        if "trace_shaped" in cases:
            for seed in (1, 2):  # the micro-benchmark's 10,000 pending x 1,000 nodes
                snap = trace_shaped_snapshot(seed)
                for name, cfg in CONFIGS.items():
                    rec.pass_(f"trace_shaped{seed}/{name}", 1, schedule(snap, 200.0, cfg))
        if "random" in cases:
            for name, cfg in CONFIGS.items():
                rng = random.Random(name)
                for n in range(args.random):
                    snap, now = random_snapshot(rng)
                    rec.pass_(f"random/{name}", n + 1, schedule(snap, now, cfg))
    print(f"{rec.passes} passes, {rec.with_preemption} with preemptions -> {args.out}")
    return 0


def philly(rec: Recorder, args: argparse.Namespace) -> None:
    """Philly windows of ``--count`` jobs on 4 nodes, every configuration."""
    trace = load_trace(os.path.join(args.traces_dir, "philly_vc.csv.gz"))
    vc = load_vc_nodes(os.path.join(args.traces_dir, "philly_vc_nodes.csv"))
    nodes = [Node(f"node-{i:04d}", 8, 64, 512_000, "") for i in range(4)]
    total = sum(n.gpus for n in nodes)
    for start in [int(s) for s in args.starts.split(",")]:
        jobs = window(trace, start, args.count)
        tenants = sorted({j.tenant for j in jobs} | set(vc))
        vc_total = sum(vc.values()) or 1
        quotas = {t: Quota(t, total * vc.get(t, 0) // vc_total, total // 2) for t in tenants}
        for name, cfg in CONFIGS.items():
            rec.replay(f"philly{start}/{name}", jobs, nodes, quotas, cfg)


def alibaba(rec: Recorder, args: argparse.Namespace) -> None:
    """The Alibaba week's GPU pods 20 times faster on 2 nodes, QoS classes as tenants."""
    jobs = [replace(j, submit_time=j.submit_time / 20)
            for j in load_trace(os.path.join(args.traces_dir, "alibaba_openb_week.csv"),
                                tenant_column="qos") if j.num_gpus > 0]
    qos = sorted({j.tenant for j in jobs})
    nodes = [Node(f"node-{i:04d}", 8, 64, 512_000, "") for i in range(2)]
    quotas = {t: Quota(t, 16 // len(qos), 8) for t in qos}
    for name in ("default", "live", "live_checkpoint_aware"):
        rec.replay(f"alibaba/{name}", jobs, nodes, quotas, CONFIGS[name])


if __name__ == "__main__":
    sys.exit(main())
