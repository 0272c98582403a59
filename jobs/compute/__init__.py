"""Execution backends. The rest of Gantry talks to `get_backend()` and never knows which one runs."""

from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

BACKENDS = {
    "local": "jobs.compute.local.LocalBackend",
    "kubernetes": "jobs.compute.kubernetes.backend.KubernetesBackend",
}


@cache
def _load(name: str):
    try:
        path = BACKENDS[name]
    except KeyError:
        raise LookupError(
            f"GANTRY_JOB_BACKEND={name!r}: unknown backend (choose from {', '.join(BACKENDS)})"
        ) from None
    return import_string(path)()


def get_backend(name: str | None = None):
    return _load(name or settings.GANTRY_JOB_BACKEND)


def reset_backends() -> None:
    """Forget backend instances (tests use it to simulate a restart of the worker)."""
    _load.cache_clear()
