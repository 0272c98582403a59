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
"""

import hashlib

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse
from django.utils import timezone, translation
from rest_framework import status
from rest_framework.response import Response

from core import generations

TTL = 30


def changed(name: str) -> None:
    """What lists tagged `name` show has changed (on commit): their answers are stale."""
    if settings.GANTRY_LIST_CACHE:
        generations.changed(name)


class CachedListMixin:
    """For a DRF viewset: `list` answered from the cache while `list_generations` (names
    given to `changed`) and the access generation stay where they were."""

    list_generations: tuple[str, ...] = ()

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
        return HttpResponse(content, content_type=request.accepted_renderer.media_type, headers={"ETag": etag})

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
