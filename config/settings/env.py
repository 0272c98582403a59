"""Reading settings from the environment: typed, with a message naming the variable.

A malformed value stops start-up with "Configuration error in NAME: ..." instead of a
traceback somewhere later, and a switch spelled wrong (DEBUG=ture) is an error, not False.

Values are taken exactly as written. django-environ's `Env.str()` and friends read a value
that starts with `$` as the name of another variable ("proxied values"), so a secret key,
database password or S3 key that happens to start with `$` silently became something else
(a generated key does one time in fifty). Here the raw string comes from `os.environ` and
only django-environ's parser (`Env.parse_value`: lists, JSON) is used on it.
"""

import json
import os

import environ
from django.core.exceptions import ImproperlyConfigured

env = environ.Env()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_CASTS = {"str": str, "int": int, "float": float, "list": list, "json": json.loads}


def fail(name: str, problem: str):
    raise ImproperlyConfigured(f"Configuration error in {name}: {problem}")


def setting(kind, name, default):
    """The variable `name` read as `kind` (str, int, float, bool, list or json), verbatim."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if kind == "bool":
        # django-environ reads any unknown word as False; a typo must not turn a switch off.
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        fail(name, f"expected true or false, got {raw!r}")
    try:
        return environ.Env.parse_value(raw, _CASTS[kind])
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        fail(name, f"{exc} (got {raw!r})")
