"""`gantry.yml`: a job's spec beside its code, like dstack's configuration files.

    project: vision            # id, slug, or tenant/slug
    name: digits
    image: pytorch             # an image id, name or reference
    command: python train.py   # or a list of words
    gpus: 1
    parameters: {epochs: 10, lr: 0.003}
    ignore: [data/, "*.ckpt"]  # more to leave out of the snapshot (git's syntax)

Checked here field by field (types and ranges as the API's JobSubmit schema has them), so
a mistake is named before anything is uploaded; the server checks again on submit.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from gantry_cli.sdk import GantryError

KINDS = ("train", "distributed", "notebook")


class SpecError(GantryError):
    exit_code = 2


def _int(minimum: int | None = None, nullable: bool = False):
    def check(name: str, value: Any) -> Any:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{name}: a whole number, not {value!r}")
        if minimum is not None and value < minimum:
            raise SpecError(f"{name}: at least {minimum}, not {value}")
        return value

    return check


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise SpecError(f"{name}: a string, not {value!r}")
    return str(value)


def _command(name: str, value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return shlex.join(str(v) for v in value)
    if isinstance(value, str) and value.strip():
        return value
    raise SpecError(f"{name}: a command line or a list of words, not {value!r}")


def _mapping(name: str, value: Any) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise SpecError(f"{name}: a mapping of names to values, not {value!r}")
    for key, item in value.items():
        if isinstance(item, dict | list):
            raise SpecError(f"{name}.{key}: a plain value, not {item!r}")
    return value


def _env(name: str, value: Any) -> dict:
    value = _mapping(name, value)
    return {k: "" if v is None else str(v) for k, v in value.items()}


def _kind(name: str, value: Any) -> str:
    if value not in KINDS:
        raise SpecError(f"{name}: one of {', '.join(KINDS)}, not {value!r}")
    return value


def _inputs(name: str, value: Any) -> list:
    if not isinstance(value, list):
        raise SpecError(f"{name}: a list, not {value!r}")
    checked = []
    for i, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool):
            item = {"dataset_version": item}
        if not isinstance(item, dict) or not item:
            raise SpecError(f"{name}[{i}]: a dataset version id or a mapping, not {item!r}")
        checked.append(item)
    return checked


def _patterns(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{name}: a list of patterns, not {value!r}")
    return value


FIELDS = {
    "project": _text,
    "name": _text,
    "kind": _kind,
    "image": _text,
    "command": _command,
    "parameters": _mapping,
    "env": _env,
    "gpus": _int(0),
    "cpus": _int(1),
    "memory_mb": _int(16),
    "workers": _int(1),
    "inputs": _inputs,
    "outputs_dir": _text,
    "timeout_seconds": _int(1, nullable=True),
    "max_retries": _int(0),
    "priority": _int(),
    "ignore": _patterns,
}


def validate(raw: Any, source: str = "gantry.yml") -> dict:
    """The spec, checked; SpecError naming the field (and the file) otherwise."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: a mapping of fields (project, command, gpus, ...)")
    spec = {}
    for key, value in raw.items():
        check = FIELDS.get(key)
        if check is None:
            known = ", ".join(sorted(FIELDS))
            raise SpecError(f"{source}: unknown field {key!r} (known: {known})")
        try:
            spec[key] = check(key, value)
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}") from None
    return spec


def load(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except OSError as exc:
        raise SpecError(f"{path}: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{path}: not valid YAML{where}: {problem}") from None
    return validate(raw, str(path))
