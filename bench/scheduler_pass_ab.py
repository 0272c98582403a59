#!/usr/bin/env python
"""``schedule()`` at a git ref against the working tree's, on ``bench/scheduler_micro.py``'s
cases (10,000 pending jobs x 1,000 nodes: a full cluster, a half-empty one, trace-shaped).
Each round runs both sides in fresh processes, alternating which goes first; the JSON has
every round's p50/p99 (wall and CPU) and their medians per side. Runs without Django:

    python bench/scheduler_pass_ab.py --before-ref 95fe622 --rounds 6 --repeats 20 \\
        --out bench/results/scheduler_pass_refactor.json

On a shared machine wall time measures the others too: compare the CPU columns, and the
medians over rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MODULE = "scheduling/policy/schedule_pass.py"
KEYS = ("p50_ms", "p99_ms", "cpu_p50_ms", "cpu_p99_ms")


def side(ref: str | None, repeats: int) -> dict:
    """One side's micro-benchmark, in this process: ``ref``'s pass or the working tree's."""
    import scheduler_micro

    if ref is not None:
        src = subprocess.run(["git", "-C", ROOT, "show", f"{ref}:{MODULE}"], check=True,
                             capture_output=True, text=True).stdout
        path = os.path.join(tempfile.mkdtemp(prefix="gantry-pass-"), "schedule_pass_before.py")
        with open(path, "w") as fh:
            fh.write(src)
        name = "scheduling.policy._schedule_pass_before"  # its relative imports resolve here
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        scheduler_micro.schedule = mod.schedule
    # (Both sides without the cache: a ref before it has none.)
    return scheduler_micro.micro_benchmark(repeats, cached=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before-ref", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  "scheduler_pass_refactor.json"))
    ap.add_argument("--side", choices=("before", "after"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        ref = args.before_ref if args.side == "before" else None
        json.dump(side(ref, args.repeats), sys.stdout)
        return 0
    rounds: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            proc = subprocess.run(
                [sys.executable, __file__, "--side", name, "--before-ref", args.before_ref,
                 "--repeats", str(args.repeats)],
                check=True, capture_output=True, text=True, cwd=ROOT,
            )
            rounds[name].append(json.loads(proc.stdout))
            print(f"round {i + 1} {name}: " + ", ".join(
                f"{case} cpu p50 {m['cpu_p50_ms']} ms" for case, m in rounds[name][-1].items()),
                flush=True)
    cases = list(rounds["before"][0])
    medians = {
        name: {case: {k: round(statistics.median(r[case][k] for r in runs), 2) for k in KEYS}
               for case in cases}
        for name, runs in rounds.items()
    }
    for name in ("before", "after"):
        for case in cases:
            medians[name][case]["admitted"] = rounds[name][0][case]["admitted"]
            medians[name][case]["preempted"] = rounds[name][0][case]["preempted"]
    ratio = {case: {k: round(medians["after"][case][k] / medians["before"][case][k], 3)
                    for k in KEYS} for case in cases}
    results = {
        "generated_by": "bench/scheduler_pass_ab.py",
        "command": (f"python bench/scheduler_pass_ab.py --before-ref {args.before_ref} "
                    f"--rounds {args.rounds} --repeats {args.repeats}"),
        "before": f"{args.before_ref}:{MODULE}",
        "after": "the working tree's " + MODULE,
        "median_over_rounds": medians,
        "after_over_before": ratio,
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        "rounds": rounds,
    }
    for case in cases:
        print(f"{case}: CPU p50 {medians['before'][case]['cpu_p50_ms']} -> "
              f"{medians['after'][case]['cpu_p50_ms']} ms (x{ratio[case]['cpu_p50_ms']}), "
              f"p99 {medians['before'][case]['cpu_p99_ms']} -> "
              f"{medians['after'][case]['cpu_p99_ms']} ms")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
