"""`manage.py simulate TRACE`: replay a GPU trace through the live scheduling policy.

A thin wrapper of `scheduling.run_simulation` (the engine of bench/simulate.py):
the Gantry policy and a FIFO baseline run on the same trace, nodes and quotas in this
process, and the headline numbers are printed (the full result with `--out`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduling import (
    Node,
    Quota,
    TraceError,
    load_trace,
    load_vc_nodes,
    run_simulation,
    window,
)

COLUMNS = [
    ("avg_jct_s", "avg JCT h", 3600),
    ("p95_jct_s", "p95 JCT h", 3600),
    ("avg_wait_s", "avg wait h", 3600),
    ("p95_wait_s", "p95 wait h", 3600),
    ("gpu_utilization", "GPU util", 1),
    ("jain_index", "Jain", 1),
    ("preemptions", "preempt", 1),
    ("quota_violations", "quota viol", 1),
    ("unschedulable", "never fit", 1),
]


def read_quotas(path: str, tenants: set[str], total: int) -> dict[str, Quota]:
    """CSV with tenant, guaranteed_gpus, borrow_limit_gpus and optionally max_jobs, weight.
    Tenants of the trace missing from it are best effort (0 guaranteed, may borrow all)."""
    quotas: dict[str, Quota] = {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    quotas[row["tenant"]] = Quota(
                        row["tenant"],
                        int(row["guaranteed_gpus"]),
                        int(row.get("borrow_limit_gpus") or 0),
                        max_jobs=int(row["max_jobs"]) if row.get("max_jobs") else None,
                        weight=float(row.get("weight") or 1.0),
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    raise CommandError(
                        f"{path}, line {line}: expected tenant, guaranteed_gpus, "
                        f"borrow_limit_gpus[, max_jobs, weight] ({exc})"
                    ) from None
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    for t in tenants - set(quotas):
        quotas[t] = Quota(t, 0, total)
    return quotas


def db_quotas(tenants: set[str], total: int) -> dict[str, Quota]:
    """This installation's TenantQuota rows, by tenant slug; others best effort."""
    from accounts.models import Tenant
    from scheduling.admission import quotas_for

    known = quotas_for(Tenant.objects.filter(slug__in=tenants).select_related("quota"), total)
    return {t: known.get(t) or Quota(t, 0, total) for t in tenants}


class Command(BaseCommand):
    help = (
        "Replay a trace CSV (job_id, submit_time, duration, num_gpus[, tenant]) through "
        "Gantry's scheduler and a FIFO baseline; print JCT, wait, utilization, fairness, "
        "preemptions and quota violations."
    )

    def add_arguments(self, parser):
        parser.add_argument("trace", help="trace CSV or CSV.gz (see scheduling/traces.py)")
        parser.add_argument("--nodes", type=int, default=32, help="number of nodes (32)")
        parser.add_argument("--gpus-per-node", type=int, default=8)
        parser.add_argument("--cpus-per-node", type=int, default=64)
        parser.add_argument("--memory-mb-per-node", type=int, default=512_000)
        parser.add_argument(
            "--quotas",
            default="equal",
            help="'equal' (each tenant guaranteed an equal share, may borrow the rest), "
            "'db' (this installation's tenant quotas, by slug), or a CSV file",
        )
        parser.add_argument(
            "--vc-nodes",
            help="Philly-style 'vc,node num' file: guarantees proportional to it, "
            "borrowing up to half the cluster (as bench/simulate.py); overrides --quotas",
        )
        parser.add_argument("--start", type=int, default=0, help="first job of the window")
        parser.add_argument("--count", type=int, default=0, help="jobs in the window (0: all)")
        parser.add_argument("--policy", choices=["both", "gantry", "fifo"], default="both")
        parser.add_argument(
            "--estimate",
            choices=["realistic", "user", "oracle", "none"],
            default="realistic",
            help="runtime estimates the policy sees: 'realistic' (the trace's requested time, "
            "else a user-estimate model; see scheduling/simulator.py), 'oracle' (true "
            "durations, optimistic), 'none'",
        )
        parser.add_argument("--out", help="write the full results as JSON here")

    def handle(self, *args, **opts):
        for name in ("nodes", "gpus_per_node", "cpus_per_node", "memory_mb_per_node"):
            if opts[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if opts["start"] < 0 or opts["count"] < 0:
            raise CommandError("--start and --count must not be negative")
        try:
            jobs = load_trace(opts["trace"])
        except TraceError as exc:
            raise CommandError(f"malformed trace: {exc}") from None
        skipped = [f"line {line}, {reason}" for line, reason in jobs.skipped]
        if skipped:
            self.stderr.write(f"skipped {len(skipped)} malformed row(s): " + "; ".join(skipped[:5])
                              + ("; ..." if len(skipped) > 5 else ""))
        if opts["start"] or opts["count"]:
            jobs = window(jobs, opts["start"], opts["count"] or len(jobs))
        if not jobs:
            why = f" ({len(skipped)} malformed row(s) skipped: {skipped[0]})" if skipped else ""
            raise CommandError(f"the trace (or the chosen window) holds no jobs{why}")

        nodes = [
            Node(
                f"node-{i:04d}",
                opts["gpus_per_node"],
                opts["cpus_per_node"],
                opts["memory_mb_per_node"],
            )
            for i in range(opts["nodes"])
        ]
        total = sum(n.gpus for n in nodes)
        tenants = {j.tenant for j in jobs}
        if opts["vc_nodes"]:
            try:
                vc = load_vc_nodes(opts["vc_nodes"])
            except (OSError, TraceError) as exc:
                raise CommandError(f"cannot read {opts['vc_nodes']}: {exc}") from None
            vc_total = sum(vc.values()) or 1
            quotas = {
                t: Quota(t, total * vc.get(t, 0) // vc_total, total // 2) for t in tenants | set(vc)
            }
        elif opts["quotas"] == "equal":
            share = total // len(tenants)
            quotas = {t: Quota(t, share, total - share) for t in tenants}
        elif opts["quotas"] == "db":
            quotas = db_quotas(tenants, total)
        else:
            quotas = read_quotas(opts["quotas"], tenants, total)

        policies = ["fifo", "gantry"] if opts["policy"] == "both" else [opts["policy"]]
        results = {
            "trace": str(opts["trace"]),
            "jobs": len(jobs),
            "cluster": {"nodes": len(nodes), "gpus": total},
            "quotas": {t: [q.guaranteed_gpus, q.borrow_limit_gpus] for t, q in quotas.items()},
        }
        for policy in policies:
            self.stderr.write(f"running {policy} on {len(jobs)} jobs, {total} GPUs …")
            res = run_simulation(jobs, nodes, quotas, policy, estimate=opts["estimate"])
            res.pop("per_job", None)
            results[policy] = res
        if len(policies) == 2:
            results["gantry_vs_fifo"] = {
                key: round(1 - results["gantry"][key] / results["fifo"][key], 4)
                if results["fifo"][key]
                else None
                for key in ("avg_jct_s", "p95_jct_s", "avg_wait_s", "p95_wait_s")
            }

        self.stdout.write("policy  " + "".join(label.rjust(12) for _, label, _ in COLUMNS))
        for policy in policies:
            cells = []
            for key, _, div in COLUMNS:
                value = results[policy][key]
                cells.append(f"{value / div:.2f}" if isinstance(value, float) else str(value))
            self.stdout.write(policy.ljust(8) + "".join(c.rjust(12) for c in cells))
        if "gantry_vs_fifo" in results:
            changes = ", ".join(
                f"{k.removesuffix('_s')} {-v:+.0%}"
                for k, v in results["gantry_vs_fifo"].items()
                if v is not None
            )
            self.stdout.write(f"gantry against fifo (negative is better): {changes}")
        if opts["out"]:
            Path(opts["out"]).write_text(json.dumps(results, indent=1))
            self.stdout.write(f"wrote {opts['out']}")
