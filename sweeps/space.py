"""The sweep document (YAML or JSON) and its search space: parsing, validation, sampling.

    name: digits
    objective: {metric: val_accuracy, direction: maximize}
    template:                       # an ordinary job spec
      command: python examples/train_digits.py
      parameters: {epochs: 6}       # fixed for every trial
      cpus: 1
      memory_mb: 1024
    parameters:                     # the search space, sampled in this order
      lr: {type: loguniform, low: 0.0001, high: 0.1}
      batch-size: {type: categorical, choices: [32, 64, 128]}
      optimizer: {type: categorical, choices: [adam, sgd]}
      momentum: {type: uniform, low: 0.5, high: 0.99, when: {optimizer: sgd}}
      width: {type: int, low: 16, high: 128, step: 16}
    sampler: tpe                    # random | grid | tpe | cmaes
    pruner: {type: asha, min_resource: 1, reduction_factor: 2}   # none | median | asha | hyperband
    budget: {trials: 8, gpu_hours: 2, wall_minutes: 60}
    parallelism: 2
    stop_after_failures: 3          # the first N trials all failed: stop the sweep
    seed: 1

A trial's parameters reach its job as the job's parameters: `--name value` appended to
the command and GANTRY_PARAM_<NAME> in its environment (jobs' usual way), beside the
template's fixed ones. Every error names the field it is about.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml
from django.core.exceptions import ValidationError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")
TYPES = ("uniform", "loguniform", "int", "categorical")
SAMPLERS = ("random", "grid", "tpe", "cmaes")
PRUNERS = ("none", "median", "asha", "hyperband")
MAX_PARAMETERS = 50
MAX_CHOICES = 100
MAX_GRID = 10_000
MAX_SOURCE = 64 * 1024


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-05` (JSON's way of writing 0.00001) as text; floats here take
    YAML 1.2's form, so a JSON document means what it says."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_document(text: str) -> dict[str, Any]:
    """YAML (JSON is YAML too) -> a mapping, or a ValidationError saying where it broke."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError({"source": "Paste the sweep as YAML or JSON."})
    if len(text) > MAX_SOURCE:
        raise ValidationError({"source": f"The sweep is over {MAX_SOURCE // 1024} KiB."})
    try:
        document = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ValidationError({"source": f"Not valid YAML or JSON{where}: {problem}."}) from None
    except RecursionError:
        raise ValidationError({"source": "The document is nested too deeply."}) from None
    if not isinstance(document, dict):
        raise ValidationError({"source": "The sweep must be a mapping (name:, objective:, parameters:, …)."})
    return document


def _number(where: str, value: Any, errors: list[str], *, integer=False) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors.append(f"{where}: must be {'an integer' if integer else 'a number'}, not {value!r}.")
        return None
    if integer and not float(value).is_integer():
        errors.append(f"{where}: must be an integer, not {value!r}.")
        return None
    return int(value) if integer else float(value)


def _scalar_ok(value: Any) -> bool:
    return isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))


def clean_parameter(name: str, spec: Any, earlier: dict[str, dict], errors: list[str]) -> dict | None:
    where = f"parameters.{name}"
    if not isinstance(name, str) or not NAME.match(name):
        errors.append(f"{where}: a parameter name is letters, digits, _ and - (not starting with a digit or -).")
        return None
    if not isinstance(spec, dict):
        errors.append(f"{where}: give a mapping such as {{type: uniform, low: 0.1, high: 1}}.")
        return None
    kind = spec.get("type")
    if kind == "float":
        kind = "loguniform" if spec.get("log") else "uniform"
    if kind not in TYPES:
        errors.append(f"{where}.type: one of {', '.join(TYPES)} (not {kind!r}).")
        return None
    clean: dict[str, Any] = {"type": kind}
    unknown = set(spec) - {"type", "low", "high", "step", "log", "choices", "when"}
    if unknown:
        errors.append(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}.")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices or len(choices) > MAX_CHOICES:
            errors.append(f"{where}.choices: a list of 1 to {MAX_CHOICES} values.")
            return None
        if not all(_scalar_ok(c) for c in choices) or len(set(map(json.dumps, choices))) != len(choices):
            errors.append(f"{where}.choices: distinct numbers, true/false or text.")
            return None
        clean["choices"] = choices
    else:
        integer = kind == "int"
        low = _number(f"{where}.low", spec.get("low"), errors, integer=integer)
        high = _number(f"{where}.high", spec.get("high"), errors, integer=integer)
        if low is None or high is None:
            return None
        if low >= high:
            errors.append(f"{where}: low must be below high ({low} ≥ {high}).")
            return None
        if kind == "loguniform" and low <= 0:
            errors.append(f"{where}.low: a log-uniform range starts above 0 (not {low}).")
            return None
        clean.update(low=low, high=high)
        if integer:
            step = _number(f"{where}.step", spec.get("step", 1), errors, integer=True)
            if step is None or step < 1:
                errors.append(f"{where}.step: a positive integer.") if step is not None else None
                return None
            clean["step"] = step
    when = spec.get("when")
    if when is not None:
        clean["when"] = clean_condition(where, when, earlier, errors)
    return clean


def clean_condition(where: str, when: Any, earlier: dict[str, dict], errors: list[str]) -> dict:
    """`when: {parent: value or [values]}`: the parameter exists only in those trials."""
    if not isinstance(when, dict) or not when:
        errors.append(f"{where}.when: a mapping of an earlier categorical parameter to its value(s).")
        return {}
    clean = {}
    for parent, values in when.items():
        values = values if isinstance(values, list) else [values]
        spec = earlier.get(parent)
        if spec is None or spec["type"] != "categorical":
            errors.append(f"{where}.when: {parent!r} is not a categorical parameter declared above it.")
            continue
        strays = [v for v in values if v not in spec["choices"]]
        if strays:
            errors.append(f"{where}.when: {strays[0]!r} is not one of {parent}'s choices.")
            continue
        clean[parent] = values
    return clean


def clean_space(parameters: Any) -> dict[str, dict]:
    if not isinstance(parameters, dict) or not parameters:
        raise ValidationError({"parameters": "Name at least one parameter to search (parameters: {lr: {...}})."})
    if len(parameters) > MAX_PARAMETERS:
        raise ValidationError({"parameters": f"At most {MAX_PARAMETERS} parameters."})
    errors: list[str] = []
    space: dict[str, dict] = {}
    for name, spec in parameters.items():
        clean = clean_parameter(name, spec, space, errors)
        if clean is not None:
            space[name] = clean
    if errors:
        raise ValidationError({"parameters": errors})
    return space


def grid_of(space: dict[str, dict]) -> dict[str, list]:
    """Grid search's points: categorical choices and integer ranges; floats cannot be gridded."""
    grid, errors = {}, []
    for name, spec in space.items():
        if spec.get("when"):
            errors.append(f"parameters.{name}: grid search takes no conditional parameters.")
        elif spec["type"] == "categorical":
            grid[name] = spec["choices"]
        elif spec["type"] == "int":
            grid[name] = list(range(spec["low"], spec["high"] + 1, spec["step"]))
        else:
            errors.append(
                f"parameters.{name}: grid search needs a finite set; make it categorical "
                "(choices: [...])."
            )
    size = math.prod(len(v) for v in grid.values()) if grid else 0
    if not errors and size > MAX_GRID:
        errors.append(f"parameters: the grid has {size:,} points (at most {MAX_GRID:,}).")
    if errors:
        raise ValidationError({"sampler": errors})
    return grid


def suggest(trial, space: dict[str, dict]) -> dict[str, Any]:
    """Sample one point: Optuna's define-by-run, skipping conditions not met."""
    params: dict[str, Any] = {}
    for name, spec in space.items():
        when = spec.get("when") or {}
        if any(params.get(parent) not in values for parent, values in when.items()):
            continue
        kind = spec["type"]
        if kind == "categorical":
            params[name] = trial.suggest_categorical(name, spec["choices"])
        elif kind == "int":
            params[name] = trial.suggest_int(name, spec["low"], spec["high"], step=spec["step"])
        else:
            params[name] = trial.suggest_float(name, spec["low"], spec["high"], log=kind == "loguniform")
    return params


def _positive(where, value, errors, *, integer=False, required=False):
    if value is None:
        if required:
            errors[where] = "Required."
        return None
    problems: list[str] = []
    number = _number(where, value, problems, integer=integer)
    if problems or number is None or number <= 0:
        errors[where] = f"{where}: a positive {'integer' if integer else 'number'} (not {value!r})."
        return None
    return number


def clean_pruner(pruner: Any, errors: dict) -> dict:
    if pruner is None or isinstance(pruner, str):
        pruner = {"type": pruner or "none"}
    if not isinstance(pruner, dict) or pruner.get("type") not in PRUNERS:
        errors["pruner"] = f"pruner: one of {', '.join(PRUNERS)} (or {{type: asha, ...}})."
        return {"type": "none"}
    clean = {"type": pruner["type"]}
    for key, default in (("min_resource", 1), ("reduction_factor", 3), ("max_resource", None),
                         ("startup_trials", 2), ("warmup_steps", 0)):
        value = pruner.get(key, default)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors["pruner"] = f"pruner.{key}: a whole number ≥ 0 (not {value!r})."
            continue
        clean[key] = value
    if clean.get("reduction_factor", 3) < 2:
        errors["pruner"] = "pruner.reduction_factor: at least 2."
    return clean


def parse_sweep(text: str) -> dict[str, Any]:
    """The sweep document -> the cleaned fields of a Sweep (the template still to be checked
    by jobs' own validation, in services). Raises ValidationError keyed by field."""
    doc = load_document(text)
    errors: dict[str, Any] = {}
    unknown = set(doc) - {"name", "objective", "template", "parameters", "sampler", "pruner",
                          "budget", "parallelism", "stop_after_failures", "seed"}
    if unknown:
        errors["source"] = f"Unknown keys: {', '.join(sorted(map(str, unknown)))}."
    name = doc.get("name") or "sweep"
    if not isinstance(name, str) or len(name) > 200:
        errors["name"] = "name: text of at most 200 characters."
    objective = doc.get("objective")
    if isinstance(objective, str):
        objective = {"metric": objective}
    metric = objective.get("metric") if isinstance(objective, dict) else None
    direction = (objective or {}).get("direction", "maximize") if isinstance(objective, dict) else None
    if not isinstance(metric, str) or not metric.strip() or len(metric) > 200:
        errors["objective"] = "objective: {metric: <a metric the trials log>, direction: maximize|minimize}."
    elif direction not in ("maximize", "minimize"):
        errors["objective"] = f"objective.direction: maximize or minimize (not {direction!r})."
    template = doc.get("template")
    if not isinstance(template, dict) or not template.get("command"):
        errors["template"] = "template: a job spec with at least a command."
    try:
        space = clean_space(doc.get("parameters"))
    except ValidationError as exc:
        errors.update(exc.message_dict)
        space = {}
    sampler = doc.get("sampler", "tpe")
    if isinstance(sampler, dict):
        sampler = sampler.get("type")
    if sampler not in SAMPLERS:
        errors["sampler"] = f"sampler: one of {', '.join(SAMPLERS)} (not {sampler!r})."
    pruner = clean_pruner(doc.get("pruner"), errors)
    budget = doc.get("budget") or {}
    if not isinstance(budget, dict) or set(budget) - {"trials", "gpu_hours", "wall_minutes"}:
        errors["budget"] = "budget: {trials: N, gpu_hours: H, wall_minutes: M} (at least one)."
        budget = {}
    max_trials = _positive("budget.trials", budget.get("trials"), errors, integer=True)
    gpu_hours = _positive("budget.gpu_hours", budget.get("gpu_hours"), errors)
    wall = _positive("budget.wall_minutes", budget.get("wall_minutes"), errors)
    if "budget" not in errors and not any(k in budget for k in ("trials", "gpu_hours", "wall_minutes")):
        errors["budget"] = "budget: give at least one of trials, gpu_hours, wall_minutes."
    if max_trials and max_trials > 10_000:
        errors["budget.trials"] = "budget.trials: at most 10,000."
    parallelism = _positive("parallelism", doc.get("parallelism", 2), errors, integer=True)
    if parallelism and parallelism > 100:
        errors["parallelism"] = "parallelism: at most 100."
    failures = _positive("stop_after_failures", doc.get("stop_after_failures", 3), errors, integer=True)
    seed = doc.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        errors["seed"] = "seed: a whole number from 0 to 2^31-1."
    if sampler == "grid" and space and "sampler" not in errors:
        try:
            grid = grid_of(space)
        except ValidationError as exc:
            errors.update(exc.message_dict)
        else:
            size = math.prod(len(v) for v in grid.values())
            max_trials = min(max_trials or size, size)
    if errors:
        raise ValidationError(errors)
    return {
        "name": name,
        "objective": metric.strip(),
        "direction": direction,
        "template": template,
        "space": space,
        "sampler": sampler,
        "pruner": pruner,
        "max_trials": max_trials,
        "max_gpu_hours": gpu_hours,
        "max_wall_seconds": int(wall * 60) if wall else None,
        "parallelism": parallelism,
        "stop_after_failures": failures,
        "seed": seed,
    }
