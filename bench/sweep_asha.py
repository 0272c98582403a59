#!/usr/bin/env python
"""ASHA against random search without pruning, on the digits example: compute spent to
reach a target validation accuracy, same trial budget, same seeds.

    python bench/sweep_asha.py [--trials 16] [--epochs 10] [--seeds 0 1 2 3 4]
        [--target 0.975] [--asha-min-resource 1 3] [--out bench/results/sweep_asha.json]

Both arms use what a Gantry sweep builds (sweeps.engine.sampler_for / pruner_for: a
RandomSampler seeded as the controller seeds it, and SuccessiveHalvingPruner with
min_resource 1, reduction factor 3, or none), on an in-memory study, and ask/tell
exactly as the controller does: one objective report per epoch (step = epoch), the
pruner asked after each. With the same seed the random sampler proposes the same
configurations in the same order in both arms, so the only difference is pruning.

Trials run one after another in this process (torch, one thread) rather than as Gantry
jobs: this measures the search strategy, not job start-up (bench/job_latency.py does).
There is no GPU here: "GPU-hours" are CPU-seconds of training (time.process_time of the
trial's epochs, one thread, so about its wall time); a trial's cost is its epochs run.

Reported per arm and seed: CPU-seconds until the first report at or above --target,
total CPU-seconds for the whole budget, epochs run, trials pruned, best accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

SPACE = {
    "lr": {"type": "loguniform", "low": 1e-5, "high": 0.1},
    "batch-size": {"type": "categorical", "choices": [16, 32, 64, 128]},
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--target", type=float, default=0.975)
    parser.add_argument(
        "--asha-min-resource", type=int, nargs="+", default=[1, 3],
        help="ASHA's first rung (epochs); each value is an arm of its own",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "sweep_asha.json"))
    return parser.parse_args()


class Digits:
    """The example's data and network (examples/digits_common.py), trained epoch by epoch."""

    def __init__(self):
        import torch
        from digits_common import digits_split, to_images

        torch.set_num_threads(1)
        x_train, y_train, x_test, y_test = digits_split()
        self.train = (to_images(x_train), torch.as_tensor(y_train))
        self.test = (to_images(x_test), torch.as_tensor(y_test))

    def trial(self, params: dict, seed: int):
        """Yields (val_accuracy, cpu_seconds) after each epoch."""
        import torch
        from digits_common import DigitsNet
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(seed)
        model = DigitsNet()
        optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])
        loader = DataLoader(TensorDataset(*self.train), batch_size=params["batch-size"], shuffle=True)
        while True:
            started = time.process_time()
            model.train()
            for images, labels in loader:
                loss = nn.functional.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                accuracy = (model(self.test[0]).argmax(dim=1) == self.test[1]).float().mean().item()
            yield accuracy, time.process_time() - started


def run_arm(digits: Digits, pruner: str, min_resource: int, seed: int, args) -> dict:
    import optuna
    from optuna.trial import TrialState

    from sweeps import engine
    from sweeps.space import suggest

    sweep = SimpleNamespace(
        sampler="random", seed=seed, space=SPACE, max_trials=args.trials, direction="maximize",
        pruner={"type": pruner, "min_resource": min_resource, "reduction_factor": 3},
    )
    study = optuna.create_study(
        sampler=engine.sampler_for(sweep, 0), pruner=engine.pruner_for(sweep), direction="maximize"
    )
    spent = 0.0
    reached = None
    epochs = pruned = 0
    best = 0.0
    rows = []
    for number in range(args.trials):
        trial = study.ask()
        params = suggest(trial, SPACE)
        state, last = TrialState.COMPLETE, None
        for epoch, (accuracy, seconds) in enumerate(digits.trial(params, seed * 1000 + number), 1):
            spent += seconds
            epochs += 1
            best = max(best, accuracy)
            last = accuracy
            if reached is None and accuracy >= args.target:
                reached = {"cpu_seconds": round(spent, 2), "trial": number, "epoch": epoch}
            trial.report(accuracy, epoch)
            if epoch >= args.epochs:
                break
            if trial.should_prune():
                state = TrialState.PRUNED
                pruned += 1
                break
        study.tell(trial, last if state == TrialState.COMPLETE else None, state=state)
        rows.append({"trial": number, "params": params, "epochs": epoch, "last": round(last, 4), "state": state.name})
    return {
        "arm": arm_name(pruner, min_resource),
        "seed": seed,
        "reached_target": reached,
        "total_cpu_seconds": round(spent, 2),
        "epochs_run": epochs,
        "trials_pruned": pruned,
        "best_val_accuracy": round(best, 4),
        "trials": rows,
    }


def arm_name(pruner: str, min_resource: int) -> str:
    return "random" if pruner == "none" else f"asha_min{min_resource}"


def main() -> int:
    args = parse_args()
    import django

    django.setup()
    digits = Digits()
    runs = []
    for seed in args.seeds:
        for pruner, min_resource in [("none", 1)] + [("asha", m) for m in args.asha_min_resource]:
            run = run_arm(digits, pruner, min_resource, seed, args)
            runs.append(run)
            hit = run["reached_target"]
            where = f"at {hit['cpu_seconds']:.1f} s (trial {hit['trial']})" if hit else "not reached"
            print(
                f"seed {seed} {run['arm']:>11}: target {where}; "
                f"budget {run['total_cpu_seconds']:.1f} s, {run['epochs_run']} epochs, "
                f"{run['trials_pruned']} pruned, best {run['best_val_accuracy']}",
                flush=True,
            )

    def summary(arm):
        mine = [r for r in runs if r["arm"] == arm]
        hits = [r["reached_target"]["cpu_seconds"] for r in mine if r["reached_target"]]
        return {
            "seeds_reaching_target": len(hits),
            "mean_cpu_seconds_to_target": round(sum(hits) / len(hits), 2) if hits else None,
            "mean_total_cpu_seconds": round(sum(r["total_cpu_seconds"] for r in mine) / len(mine), 2),
            "mean_best_val_accuracy": round(sum(r["best_val_accuracy"] for r in mine) / len(mine), 4),
        }

    result = {
        "what": "CPU-seconds (standing in for GPU-hours: no GPU here) of digits training to reach "
        "a validation accuracy target: random search with ASHA against random search without "
        "pruning, same trial budget, same sampler seeds (same configurations in the same order)",
        "trials": args.trials,
        "epochs_per_trial": args.epochs,
        "target_val_accuracy": args.target,
        "seeds": args.seeds,
        "space": SPACE,
        "asha": {"min_resource": args.asha_min_resource, "reduction_factor": 3},
        "cpu_threads": 1,
        "machine_load_at_start": os.getloadavg()[0],
        "summary": {arm: summary(arm) for arm in dict.fromkeys(r["arm"] for r in runs)},
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
