"""Gantry's watches of a cluster's pods and Jobs, read as raw JSON.

`ResourceWatch` lists, then watches from the list's resourceVersion, resumes from the
last one it saw (bookmarks included), and lists again when the API server answers 410
Gone. Lists and events are never deserialized into the client's models: `Raw` reads the
JSON with the client's attribute names, wrapping only the fields looked at
(`jobs.compute.kubernetes.watch` decides what they mean).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime

from django.db import close_old_connections

logger = logging.getLogger(__name__)


class Raw(dict):
    """A Kubernetes object as the API server's JSON, read with the client's attribute
    names (`pod.status.container_statuses`, `cond.last_transition_time`): only the
    fields Gantry looks at are wrapped, on access (a missing one is None, a `*_time` or
    `*_timestamp` a datetime, an object true even when empty). Deserializing every watched pod into V1Pod objects was
    most of the watcher's CPU at scale (bench/k8s_scale.py)."""

    __slots__ = ()

    def __bool__(self) -> bool:
        # As a model object is: `state.running` is `{}` for a running container.
        return True

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = self.get(_CAMEL.get(name) or _camel(name))
        if isinstance(value, dict):
            return value if isinstance(value, Raw) else Raw(value)
        if isinstance(value, list):
            return [Raw(v) if isinstance(v, dict) and not isinstance(v, Raw) else v for v in value]
        if isinstance(value, str) and name.endswith(("_time", "_timestamp")):
            return _parse_time(value)
        return value


_CAMEL: dict[str, str] = {}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    _CAMEL[name] = key = head + "".join(part[:1].upper() + part[1:] for part in rest)
    return key


def _parse_time(value: str):
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class ResourceWatch:
    """List, then watch from the list's resourceVersion; resume from the last version
    seen when a watch ends; list again on 410 Gone (the version is too old). Lists and
    events are read as raw JSON (`Raw`), never deserialized into the client's models."""

    def __init__(self, list_func, handle, *, label_selector: str, timeout_seconds: int = 300):
        self.list_func = list_func
        self.handle = handle
        self.label_selector = label_selector
        self.timeout_seconds = timeout_seconds
        self.resource_version: str | None = None
        self.relists = 0
        self._stopped = False

    def _request(self, **kwargs):
        from kubernetes.client.exceptions import ApiException

        response = self.list_func(
            label_selector=self.label_selector, _preload_content=False, **kwargs
        )
        if not 200 <= response.status <= 299:  # the client raises too; be sure
            raise ApiException(http_resp=response)
        return response

    def relist(self) -> None:
        response = self._request()
        try:
            listing = json.loads(response.data)
        finally:
            response.release_conn()
        for item in listing.get("items") or []:
            self._handle("SYNC", Raw(item))
        self.resource_version = (listing.get("metadata") or {}).get("resourceVersion")
        self.relists += 1

    def _handle(self, event_type: str, obj) -> None:
        try:
            self.handle(event_type, obj)
        except Exception:
            logger.exception(
                "handling %s %s failed", event_type, getattr(obj.metadata, "name", "?")
            )

    def watch_once(self) -> None:
        """One watch request, until the server closes it (timeout_seconds) or 410."""
        from kubernetes.client.exceptions import ApiException

        if self.resource_version is None:
            self.relist()
        self._stopped = False
        try:
            self._stream()
        except ApiException as exc:
            if exc.status != 410:
                raise
            logger.info("watch expired (410 Gone): listing again")
            self.resource_version = None
            self.relist()

    def _stream(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        response = self._request(
            watch=True,
            resource_version=self.resource_version,
            timeout_seconds=self.timeout_seconds,
            allow_watch_bookmarks=True,
        )
        try:
            for line in iter_resp_lines(response):
                if not line or line.isspace():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiException(
                        status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}"
                    )
                if kind != "BOOKMARK":
                    self._handle(kind, Raw(obj))
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = version
                if self._stopped:
                    break
        finally:
            response.close()
            response.release_conn()

    def run(self, stop: threading.Event, backoff: float = 5.0) -> None:
        while not stop.is_set():
            # A long-running thread: drop database connections that went stale meanwhile.
            close_old_connections()
            try:
                self.watch_once()
            except Exception:
                logger.exception("watch failed; retrying in %s s", backoff)
                stop.wait(backoff)

    def stop(self) -> None:
        self._stopped = True
