"""API lists answered from Redis while nothing they show has changed.

Scripts, dashboards and open browser tabs ask for the same job list again and again,
and each answer costs a count, the page's ids and the page's rows. A computed answer
is kept per user and per absolute URL (page, filters, host), tagged with generations:
numbers in Redis that every committed change to what the list shows moves on
(`changed`), plus the access generation (projects.permissions), which moves with
memberships and projects. An answer whose generations are not the current ones is
never used, only replaced, so a list is stale only between a commit and its on-commit
bump; a bump lost in that moment (a killed process) heals when the entry expires.

Nothing read inside a transaction is kept (it may be the transaction's own uncommitted
rows). Answers carry an ETag: a client that sends it back in If-None-Match gets 304
while the list is unchanged. `Cache-Control: no-cache` asks for a fresh answer.
Controlled by GANTRY_LIST_CACHE (on with Redis).

Scripts ask with a personal API token and no cookie. Their repeated lists are answered
at the door (`ListCacheDoorMiddleware`, first in MIDDLEWARE), before sessions, CSRF,
URL resolution and DRF: the whole response is kept by the token's hash and the request
(URL, host, Accept), tagged with the "auth" generation too (every change to a token or
a user moves it on: a revoked token or a deactivated user is never answered there) and
the token's expiry, checked on each use. One round trip to Redis answers it. A token's
last use is written by the requests that pass the door: at most TTL later than before.
"""

import hashlib

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse, HttpResponseNotModified
from django.utils import timezone, translation
from rest_framework import status
from rest_framework.response import Response

from accounts.models import ApiToken
from core import generations

TTL = 30
# Every list's generation names (CachedListMixin.list_generations): the door reads them all.
LIST_GENERATIONS: set[str] = set()
# The paths this process has kept an answer of at the door: the others skip its lookup.
DOOR_PATHS: set[str] = set()


def changed(name: str) -> None:
    """What lists tagged `name` show has changed (on commit): their answers are stale."""
    if settings.GANTRY_LIST_CACHE:
        generations.changed(name)


class CachedListMixin:
    """For a DRF viewset: `list` answered from the cache while `list_generations` (names
    given to `changed`) and the access generation stay where they were."""

    list_generations: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        LIST_GENERATIONS.update(cls.list_generations)

    def list(self, request, *args, **kwargs):
        # Kept as the JSON sent (the browsable API's pages carry a CSRF token: not kept).
        if not settings.GANTRY_LIST_CACHE or request.accepted_renderer.format != "json":
            return super().list(request, *args, **kwargs)
        key = self._list_cache_key(request)
        current, found = generations.read(("access", *self.list_generations), key)
        entry = found.get(key)
        fresh = "no-cache" in request.headers.get("Cache-Control", "")
        if entry is not None and entry[0] == current and not fresh:
            etag, content = entry[1], entry[2]
        else:
            response = super().list(request, *args, **kwargs)
            if not generations.storable(current):
                return response
            etag = f'"{hashlib.blake2b(f"{key}{current}".encode(), digest_size=16).hexdigest()}"'
            content = request.accepted_renderer.render(
                response.data, request.accepted_media_type, self.get_renderer_context()
            )
            cache.set(key, (current, etag, content), TTL)
        if etag in request.headers.get("If-None-Match", ""):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        # Sent as it was kept: encoding the page's JSON again was an eighth of a hit's time.
        response = HttpResponse(content, content_type=request.accepted_renderer.media_type, headers={"ETag": etag})
        if isinstance(request.auth, ApiToken):
            response.door_expires = (request.auth.expires_at,)  # may be kept at the door
        return response

    def _list_cache_key(self, request) -> str:
        # Links and dates in the answer depend on the host, the language and the time zone;
        # its layout on the media type's parameters (indent).
        what = "|".join([
            request.build_absolute_uri(),
            request.accepted_media_type,
            translation.get_language() or "",
            timezone.get_current_timezone_name(),
        ])
        digest = hashlib.blake2b(what.encode(), digest_size=16).hexdigest()
        return f"list:2:{self.basename}:{request.user.pk}:{digest}"


def _door_tags() -> tuple[str, ...]:
    return ("auth", "access", *sorted(LIST_GENERATIONS))


def door_key(request) -> str | None:
    """Where a GET of the API with a personal token and no cookie is kept at the door."""
    if request.method != "GET" or request.META.get("HTTP_COOKIE") or request.path not in DOOR_PATHS:
        return None
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token.startswith(ApiToken.PREFIX):
        return None
    if "no-cache" in request.META.get("HTTP_CACHE_CONTROL", ""):
        return None
    # A host not in ALLOWED_HOSTS raises DisallowedHost here: Django answers 400.
    what = "|".join([ApiToken.hash_key(token.strip()), request.build_absolute_uri(), request.META.get("HTTP_ACCEPT", ""),
                     request.META.get("HTTP_ACCEPT_LANGUAGE", "")])
    return "door:1:" + hashlib.blake2b(what.encode(), digest_size=16).hexdigest()


class ListCacheDoorMiddleware:
    """First in MIDDLEWARE: a token's repeated API list answered from Redis in one round
    trip, or, on the way out, a list response CachedListMixin marked kept for next time.

    Kept whole (status, headers, body) as the middleware behind made it, so a hit answers
    exactly as a miss would. Not kept: responses that set a cookie, or streamed ones.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        key = door_key(request) if settings.GANTRY_LIST_CACHE else None
        if key is not None:
            current, found = generations.read(_door_tags(), key)
            entry = found.get(key)
            if entry is not None:
                tags, expires_at, headers, content = entry
                if tags == current and (expires_at is None or expires_at > timezone.now()):
                    return self._answer(request, headers, content)
        response = self.get_response(request)
        kept = getattr(response, "door_expires", None)
        if kept is None or response.status_code != 200 or response.streaming or response.cookies:
            return response
        if key is None:
            # Its generations were not read before the view: kept from the next request on.
            DOOR_PATHS.add(request.path)
        elif generations.storable(current):
            cache.set(key, (current, kept[0], dict(response.items()), response.content), TTL)
        return response

    @staticmethod
    def _answer(request, headers, content):
        etag = headers.get("ETag")
        if etag and etag in request.META.get("HTTP_IF_NONE_MATCH", ""):
            unchanged = HttpResponseNotModified()
            for name, value in headers.items():
                if name not in ("Content-Type", "Content-Length"):
                    unchanged[name] = value
            return unchanged
        return HttpResponse(content, headers=headers)
