"""Reading settings from the environment: typed, with a message naming the variable.

A malformed value stops start-up with "Configuration error in NAME: ..." instead of a
traceback somewhere later, and a switch spelled wrong (DEBUG=ture) is an error, not False.
"""

import environ
from django.core.exceptions import ImproperlyConfigured

env = environ.Env()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def fail(name: str, problem: str):
    raise ImproperlyConfigured(f"Configuration error in {name}: {problem}")


def setting(kind, name, default):
    """The variable `name` read as `kind` (django-environ's str, int, bool, list, ...)."""
    if kind == "bool":
        # django-environ reads any unknown word as False; a typo must not turn a switch off.
        raw = env.str(name, default=None)
        if raw is None:
            return default
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        fail(name, f"expected true or false, got {raw!r}")
    try:
        return getattr(env, kind)(name, default=default)
    except (ValueError, environ.ImproperlyConfigured) as exc:
        fail(name, f"{exc} (got {env.str(name, default='')!r})")
