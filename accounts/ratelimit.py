"""Counting failed sign-ins per username and client address, in the cache.

The cache is Redis in production, so every web process shares the counts;
locmem in development counts per process, which is enough on one machine. A
fixed window opens at the first failure; a successful sign-in clears it.
"""

import hashlib

from django.conf import settings
from django.core.cache import cache


def _key(username: str, ip: str | None) -> str:
    ident = f"{username.strip().lower()}|{ip or '-'}".encode()
    return "gantry:login-failures:" + hashlib.sha256(ident).hexdigest()


def login_blocked(username: str, ip: str | None) -> bool:
    return cache.get(_key(username, ip), 0) >= settings.GANTRY_LOGIN_MAX_FAILURES


def record_login_failure(username: str, ip: str | None) -> None:
    key = _key(username, ip)
    if cache.add(key, 1, timeout=settings.GANTRY_LOGIN_LOCKOUT_SECONDS):
        return
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=settings.GANTRY_LOGIN_LOCKOUT_SECONDS)


def reset_login_failures(username: str, ip: str | None) -> None:
    cache.delete(_key(username, ip))
