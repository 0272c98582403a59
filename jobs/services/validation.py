"""Checking a job spec: what a form or the API submits, field by field, against the
rules and the backend's capacity."""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from django.core.exceptions import ValidationError

from jobs.backends import get_backend
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
    show each error where it belongs.
    """
    backend = backend or get_backend()
    errors: dict[str, str] = {}
    unknown = set(spec) - set(SPEC_FIELDS)
    if unknown:
        errors["__all__"] = f"Unknown job fields: {', '.join(sorted(unknown))}."
    clean: dict[str, Any] = {}

    kind = spec.get("kind") or JobKind.TRAIN
    if kind not in JobKind.values:
        errors["kind"] = f"Choose one of: {', '.join(JobKind.values)}."
    clean["kind"] = kind

    command = (spec.get("command") or "").strip()
    if kind == JobKind.NOTEBOOK:
        command = ""  # the backend builds a notebook's command
    elif len(command) > MAX_COMMAND:
        errors["command"] = f"At most {MAX_COMMAND} characters."
    elif not command:
        errors["command"] = "Give the command to run, e.g. python train.py."
    else:
        try:
            if not shlex.split(command):
                errors["command"] = "Give the command to run, e.g. python train.py."
        except ValueError as exc:
            errors["command"] = f"Cannot split the command into arguments: {exc}."
    clean["command"] = command

    name = (spec.get("name") or "").strip()
    if not name:
        name = kind if not command else f"{kind}: {command}"[:80]
    if len(name) > 200:
        errors["name"] = "At most 200 characters."
    clean["name"] = name

    runtime = (spec.get("runtime") or "").strip()
    problem = backend.runtime_problem(runtime) if hasattr(backend, "runtime_problem") else None
    if problem:
        errors["runtime"] = problem
    clean["runtime"] = runtime

    parameters = spec.get("parameters")
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        errors["parameters"] = "Parameters must be a mapping of name to value."
        parameters = {}
    for key, value in parameters.items():
        if not isinstance(key, str) or not PARAMETER_NAME.match(key):
            errors["parameters"] = (
                f"“{key}” is not a valid parameter name (letters, digits, _ and -, "
                "not starting with a digit or -)."
            )
            break
        if not isinstance(value, bool | int | float | str) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            errors["parameters"] = (
                f"Parameter “{key}” must be a number, true/false or text, not {type(value).__name__}."
            )
            break
        if isinstance(value, str) and (len(value) > MAX_VALUE or "\x00" in value):
            errors["parameters"] = f"Parameter “{key}”: at most {MAX_VALUE} characters, no NUL."
            break
    clean["parameters"] = parameters

    env = spec.get("env")
    env = {} if env is None else env
    if not isinstance(env, dict):
        errors["env"] = "Environment must be a mapping of variable to value."
        env = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            errors["env"] = f"“{key}” is not a valid environment variable name."
            break
        if key.startswith("GANTRY_"):
            errors["env"] = f"{key}: variables starting with GANTRY_ are set by Gantry."
            break
        if not isinstance(value, bool | int | float | str) or _unstorable(value):
            errors["env"] = f"{key} must be text or a number."
            break
        if len(str(value)) > MAX_VALUE:
            errors["env"] = f"{key}: at most {MAX_VALUE} characters."
            break
    clean["env"] = {k: str(v) for k, v in env.items()} if "env" not in errors else {}

    clean["gpus"] = _int(errors, spec, "gpus", default=0)
    clean["cpus"] = _int(errors, spec, "cpus", minimum=1, default=1)
    clean["memory_mb"] = _int(errors, spec, "memory_mb", minimum=16, default=1024)
    clean["workers"] = _int(errors, spec, "workers", minimum=1, maximum=64, default=1)
    clean["timeout_seconds"] = _int(
        errors, spec, "timeout_seconds", minimum=1, maximum=MAX_TIMEOUT_SECONDS, nullable=True
    )
    clean["max_retries"] = _int(errors, spec, "max_retries", maximum=MAX_RETRIES, default=0)
    clean["priority"] = _int(errors, spec, "priority", minimum=-1000, maximum=1000, default=0)
    if clean["workers"] and clean["workers"] > 1 and kind != JobKind.DISTRIBUTED:
        errors["workers"] = "Only distributed jobs have more than one worker."

    # Resources beyond what the backend has could never be admitted.
    capacity = backend.capacity()
    n = clean["workers"] or 1
    where = backend.where
    for field, want, have, unit in (
        ("gpus", clean["gpus"], capacity.gpu_count, "GPU(s)"),
        ("cpus", clean["cpus"], capacity.cpus, "CPU(s)"),
        ("memory_mb", clean["memory_mb"], capacity.memory_mb, "MiB of memory"),
    ):
        if field in errors or want is None:
            continue
        if want * n > have:
            each = f" ({want} for each of {n} workers)" if n > 1 else ""
            errors.setdefault(
                field,
                f"Asks for {want * n} {unit}{each}, but there are only {have} {where}: "
                "it can never run as submitted.",
            )

    inputs = spec.get("inputs")
    inputs = [] if inputs is None else inputs
    if not isinstance(inputs, list):
        errors["inputs"] = "Inputs must be a list."
    elif _unstorable(inputs):
        errors["inputs"] = "Inputs may not hold NUL characters or non-finite numbers."
    clean["inputs"] = inputs if isinstance(inputs, list) else []

    outputs_dir = (spec.get("outputs_dir") or "outputs").strip().strip("/") or "outputs"
    if outputs_dir.startswith("/") or ".." in outputs_dir.split("/") or "\\" in outputs_dir:
        errors["outputs_dir"] = "A relative folder inside the job's working directory."
    clean["outputs_dir"] = outputs_dir

    if errors:
        raise ValidationError(errors)
    return clean
