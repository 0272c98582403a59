"""Checking a job spec: what a form or the API submits, field by field, against the
rules and the backend's capacity."""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from django.core.exceptions import ValidationError

from jobs.compute import get_backend
from jobs.models import JobKind

SPEC_FIELDS = (
    "name",
    "kind",
    "runtime",
    "command",
    "parameters",
    "env",
    "gpus",
    "cpus",
    "memory_mb",
    "workers",
    "inputs",
    "code_snapshot",
    "outputs_dir",
    "timeout_seconds",
    "max_retries",
    "priority",
)
# \Z, not $: a $ would let a name end in a newline.
PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
# A command is split like a shell would (slow on megabytes) and passed to exec; a value
# becomes an environment variable, and Linux refuses one longer than 128 KiB at exec.
MAX_COMMAND = 10_000
MAX_VALUE = 32_768
MAX_TIMEOUT_SECONDS = 366 * 24 * 3600
INT_MAX = 2**31 - 1  # what an integer column holds on every database
BIGINT_MAX = 2**63 - 1
MAX_RETRIES = 10


def _int(errors, spec, name, *, minimum=0, maximum=INT_MAX, default=None, nullable=False):
    value = spec.get(name, default)
    if value is None or value == "":
        if nullable:
            return None
        errors[name] = "This field is required."
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            errors[name] = "Enter a whole number."
            return None
    if value < minimum:
        errors[name] = f"Must be at least {minimum}."
    elif value > maximum:
        errors[name] = f"Must be at most {maximum}."
    return value


def _unstorable(value: Any) -> bool:
    """A NUL or a non-finite number anywhere in `value`: PostgreSQL stores neither in
    jsonb, and neither means anything in a job's spec."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return True
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def validate_spec(spec: dict[str, Any], backend=None) -> dict[str, Any]:
    """Check a job spec against the rules and the backend; returns the cleaned spec.

    Raises ValidationError with one message per field, so forms and the API can
    show each error where it belongs. Each field is checked by a step of its own
    (`clean_command`, `clean_parameters`, ...), which returns the cleaned value and
    the field's problem, if any.
    """
    backend = backend or get_backend()
    errors: dict[str, str] = {}
    unknown = set(spec) - set(SPEC_FIELDS)
    if unknown:
        errors["__all__"] = f"Unknown job fields: {', '.join(sorted(unknown))}."
    clean: dict[str, Any] = {}

    def take(field: str, value: Any, problem: str | None) -> None:
        clean[field] = value
        if problem:
            errors[field] = problem

    kind = spec.get("kind") or JobKind.TRAIN
    take("kind", kind, kind_problem(kind))
    take("command", *clean_command(kind, spec.get("command")))
    take("name", *clean_name(spec.get("name"), kind, clean["command"]))
    take("runtime", *clean_runtime(spec.get("runtime"), backend))
    take("parameters", *clean_parameters(spec.get("parameters")))
    take("env", *clean_env(spec.get("env")))
    clean.update(clean_numbers(errors, spec, kind))
    for field, problem in capacity_problems(clean, backend, skip=errors).items():
        errors.setdefault(field, problem)
    take("inputs", *clean_inputs(spec.get("inputs")))
    # Its shape and access are snapshots' (jobs.services.submit asks them).
    take("code_snapshot", spec.get("code_snapshot"), None)
    take("outputs_dir", *clean_outputs_dir(spec.get("outputs_dir")))

    if errors:
        raise ValidationError(errors)
    return clean


def kind_problem(kind: str) -> str | None:
    if kind not in JobKind.values:
        return f"Choose one of: {', '.join(JobKind.values)}."
    return None


def clean_command(kind: str, command: str | None) -> tuple[str, str | None]:
    """The command to run, split like a shell would to be sure it can be; a notebook's
    is always empty (the backend builds it)."""
    command = (command or "").strip()
    if kind == JobKind.NOTEBOOK:
        return "", None
    if len(command) > MAX_COMMAND:
        return command, f"At most {MAX_COMMAND} characters."
    missing = "Give the command to run, e.g. python train.py."
    if not command:
        return command, missing
    try:
        if not shlex.split(command):
            return command, missing
    except ValueError as exc:
        return command, f"Cannot split the command into arguments: {exc}."
    return command, None


def clean_name(name: str | None, kind: str, command: str) -> tuple[str, str | None]:
    """The job's name; without one, the kind and the start of the command."""
    name = (name or "").strip()
    if not name:
        name = kind if not command else f"{kind}: {command}"[:80]
    return name, "At most 200 characters." if len(name) > 200 else None


def clean_runtime(runtime: str | None, backend) -> tuple[str, str | None]:
    runtime = (runtime or "").strip()
    problem = backend.runtime_problem(runtime) if hasattr(backend, "runtime_problem") else None
    return runtime, problem


def clean_parameters(parameters: Any) -> tuple[dict, str | None]:
    """Parameters: names like identifiers (with -), values a number, true/false or text."""
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        return {}, "Parameters must be a mapping of name to value."
    for key, value in parameters.items():
        if not isinstance(key, str) or not PARAMETER_NAME.match(key):
            return parameters, (
                f"“{key}” is not a valid parameter name (letters, digits, _ and -, "
                "not starting with a digit or -)."
            )
        if not isinstance(value, bool | int | float | str) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            return parameters, (
                f"Parameter “{key}” must be a number, true/false or text, not {type(value).__name__}."
            )
        if isinstance(value, str) and (len(value) > MAX_VALUE or "\x00" in value):
            return parameters, f"Parameter “{key}”: at most {MAX_VALUE} characters, no NUL."
    return parameters, None


def clean_env(env: Any) -> tuple[dict[str, str], str | None]:
    """Environment variables for the job, as text; the GANTRY_ ones are Gantry's."""
    env = {} if env is None else env
    if not isinstance(env, dict):
        return {}, "Environment must be a mapping of variable to value."
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            return {}, f"“{key}” is not a valid environment variable name."
        if key.startswith("GANTRY_"):
            return {}, f"{key}: variables starting with GANTRY_ are set by Gantry."
        if not isinstance(value, bool | int | float | str) or _unstorable(value):
            return {}, f"{key} must be text or a number."
        if len(str(value)) > MAX_VALUE:
            return {}, f"{key}: at most {MAX_VALUE} characters."
    return {k: str(v) for k, v in env.items()}, None


def clean_numbers(errors: dict[str, str], spec: dict[str, Any], kind: str) -> dict[str, Any]:
    """Resources, workers, timeout, retries and priority (problems go into `errors`)."""
    numbers = {
        "gpus": _int(errors, spec, "gpus", default=0),
        "cpus": _int(errors, spec, "cpus", minimum=1, default=1),
        "memory_mb": _int(errors, spec, "memory_mb", minimum=16, default=1024),
        "workers": _int(errors, spec, "workers", minimum=1, maximum=64, default=1),
        "timeout_seconds": _int(
            errors, spec, "timeout_seconds", minimum=1, maximum=MAX_TIMEOUT_SECONDS, nullable=True
        ),
        "max_retries": _int(errors, spec, "max_retries", maximum=MAX_RETRIES, default=0),
        "priority": _int(errors, spec, "priority", minimum=-1000, maximum=1000, default=0),
    }
    if numbers["workers"] and numbers["workers"] > 1 and kind != JobKind.DISTRIBUTED:
        errors["workers"] = "Only distributed jobs have more than one worker."
    return numbers


def capacity_problems(clean: dict[str, Any], backend, skip=()) -> dict[str, str]:
    """Resources beyond what the backend has could never be admitted: one message per
    resource asked for beyond it (fields in `skip` already have a problem)."""
    capacity = backend.capacity()
    n = clean["workers"] or 1
    problems = {}
    for field, want, have, unit in (
        ("gpus", clean["gpus"], capacity.gpu_count, "GPU(s)"),
        ("cpus", clean["cpus"], capacity.cpus, "CPU(s)"),
        ("memory_mb", clean["memory_mb"], capacity.memory_mb, "MiB of memory"),
    ):
        if field in skip or want is None or want * n <= have:
            continue
        each = f" ({want} for each of {n} workers)" if n > 1 else ""
        problems[field] = (
            f"Asks for {want * n} {unit}{each}, but there are only {have} {backend.where}: "
            "it can never run as submitted."
        )
    return problems


def clean_inputs(inputs: Any) -> tuple[list, str | None]:
    """The inputs' shape only; datasets' services pin each to a version at submit."""
    inputs = [] if inputs is None else inputs
    if not isinstance(inputs, list):
        return [], "Inputs must be a list."
    if _unstorable(inputs):
        return inputs, "Inputs may not hold NUL characters or non-finite numbers."
    return inputs, None


def clean_outputs_dir(outputs_dir: str | None) -> tuple[str, str | None]:
    outputs_dir = (outputs_dir or "outputs").strip().strip("/") or "outputs"
    if outputs_dir.startswith("/") or ".." in outputs_dir.split("/") or "\\" in outputs_dir:
        return outputs_dir, "A relative folder inside the job's working directory."
    return outputs_dir, None
