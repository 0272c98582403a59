"""Optuna for one sweep: its study (from the journal in Gantry's database), sampler and
pruner, and the words a pruned trial is stopped with.

Samplers keep no state between passes except what the study holds (CMA-ES keeps its own
in the trials' system attributes), so each controller pass rebuilds them; the random
streams are seeded with the sweep's seed and the number of trials so far, so a sweep
resumed by another process samples what the first would have.

A trial's intermediate step is the count of objective values it has reported (1, 2, …:
its epoch, for a script that evaluates once an epoch), not the metric's own step: ASHA's
rungs and the median's warm-up then mean the same thing whatever the batch size.
"""

from __future__ import annotations

import logging
import statistics
import warnings

import optuna
from optuna.samplers import CmaEsSampler, GridSampler, RandomSampler, TPESampler
from optuna.trial import TrialState as OptunaState

from sweeps.journal import storage_for
from sweeps.space import grid_of

optuna.logging.set_verbosity(optuna.logging.WARNING)
logger = logging.getLogger(__name__)


class _Grid(GridSampler):
    """Grid search without its end-of-grid `study.stop()`, which only works inside
    `study.optimize`: the sweep's trial budget is the grid's size instead."""

    def after_trial(self, study, trial, state, values):
        return None


def sampler_for(sweep, trials_so_far: int):
    seed = (sweep.seed * 100_003 + trials_so_far) % 2**31
    if sweep.sampler == "random":
        return RandomSampler(seed=seed)
    if sweep.sampler == "grid":
        # Trial n runs point n of a grid shuffled by the seed: the shuffle must be the
        # same in every pass, or a later pass would repeat points of an earlier one.
        return _Grid(grid_of(sweep.space), seed=sweep.seed)
    if sweep.sampler == "cmaes":
        return CmaEsSampler(seed=seed, n_startup_trials=2, warn_independent_sampling=False)
    return TPESampler(seed=seed, n_startup_trials=min(5, max(2, (sweep.max_trials or 10) // 4)))


def pruner_for(sweep):
    config = sweep.pruner or {}
    kind = config.get("type", "none")
    if kind == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=config.get("startup_trials", 2),
            n_warmup_steps=config.get("warmup_steps", 0),
        )
    if kind == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=config.get("min_resource", 1),
            reduction_factor=config.get("reduction_factor", 3),
        )
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=config.get("min_resource", 1),
            max_resource=config.get("max_resource", "auto"),
            reduction_factor=config.get("reduction_factor", 3),
        )
    return optuna.pruners.NopPruner()


def study_for(sweep, trials_so_far: int = 0) -> optuna.Study:
    """The sweep's study, created on first use; Optuna replays its journal."""
    return optuna.create_study(
        study_name=sweep.study_name,
        storage=storage_for(sweep.pk),
        sampler=sampler_for(sweep, trials_so_far),
        pruner=pruner_for(sweep),
        direction=sweep.direction,
        load_if_exists=True,
    )


def trial_id(study: optuna.Study, number: int) -> int:
    return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def prune_reason(sweep, study: optuna.Study, frozen, step: int) -> str:
    """Why a trial was pruned, in the pruner's own terms."""
    value = frozen.intermediate_values[step]
    worse = "below" if sweep.direction == "maximize" else "above"
    kind = (sweep.pruner or {}).get("type")
    if kind == "median":
        others = [
            t.intermediate_values[step]
            for t in study.get_trials(deepcopy=False, states=(OptunaState.COMPLETE,))
            if step in t.intermediate_values
        ]
        median = statistics.median(others) if others else float("nan")
        return (
            f"pruned at step {step}: objective {sweep.objective} {_fmt(value)} worse than the "
            f"median {_fmt(median)} of {len(others)} finished trials at that step ({worse} it)"
        )
    rungs = sorted(
        int(key.rsplit("_", 1)[1])
        for key in frozen.system_attrs
        if key.startswith("completed_rung_")
    )
    eta = (sweep.pruner or {}).get("reduction_factor", 3)
    if rungs:
        rung = rungs[-1]
        key = f"completed_rung_{rung}"
        scores = [
            t.system_attrs[key] for t in study.get_trials(deepcopy=False) if key in t.system_attrs
        ]
        scores.sort(reverse=sweep.direction == "maximize")
        keep = max(len(scores) // eta, 1)
        cutoff = scores[keep - 1] if scores else float("nan")
        label = "ASHA" if kind == "asha" else "Hyperband"
        return (
            f"pruned at step {step}: objective {sweep.objective} {_fmt(value)} is not in the top "
            f"1/{eta} of the {len(scores)} trials at {label} rung {rung} (cut-off {_fmt(cutoff)})"
        )
    return f"pruned at step {step}: objective {sweep.objective} {_fmt(value)} {worse} its rung's best"


def importance(study: optuna.Study) -> dict[str, float]:
    """optuna.importance with PED-ANOVA (numpy only; fANOVA would need scikit-learn)."""
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    try:
        with warnings.catch_warnings():  # "few trials in a regime": expected early in a sweep
            warnings.simplefilter("ignore")
            found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        logger.info("no parameter importance yet: %s", exc)
        return {}
    return {name: round(float(value), 4) for name, value in found.items()}
