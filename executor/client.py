"""HTTP client for the Gantry executor API (stdlib only) with retry/backoff."""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import IO, Any, BinaryIO, TypeVar

T = TypeVar("T")

FATAL_STATUSES = frozenset({401, 403, 404})
BACKOFF_BASE = 0.2
BACKOFF_CAP = 10.0
REQUEST_TIMEOUT = 30.0

BodyFactory = Callable[[], "IO[bytes]"]


class HttpError(Exception):
    """A non-retryable HTTP error response."""

    def __init__(self, status: int, url: str, body: str = "") -> None:
        self.status = status
        self.url = url
        self.body = body
        detail = f": {body[:200]}" if body else ""
        super().__init__(f"HTTP {status} from {url}{detail}")


class FatalError(HttpError):
    """401/403/404: the job is over or the token was revoked."""


class GiveUp(Exception):
    """Retrying stopped: the deadline passed or the operation was interrupted."""


class RetryableError(Exception):
    pass


def log_stderr(msg: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"[gantry-executor] {msg}", file=sys.stderr, flush=True)


class Client:
    def __init__(
        self, api_url: str, token: str, job_id: str, *, timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.api_url = api_url.rstrip("/") + "/"
        self.token = token
        self.job_id = str(job_id)
        self.base = urllib.parse.urljoin(
            self.api_url, f"api/v1/executor/jobs/{urllib.parse.quote(self.job_id, safe='')}/"
        )
        self.timeout = timeout
        # Monotonic time after which retries stop (None = retry forever).
        self.deadline: float | None = None
        # Set once any request got 401/403/404.
        self.fatal: FatalError | None = None
        self.fatal_event = threading.Event()
        self._warn_lock = threading.Lock()
        self._failing_since: float | None = None
        self._last_warn = 0.0
        self._opener = urllib.request.build_opener()

    # -- url helpers -------------------------------------------------------
    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.base, path)

    def resolve(self, url: str) -> str:
        """Absolute URLs are kept; relative ones are resolved against api_url."""
        return urllib.parse.urljoin(self.api_url, url)

    def same_origin(self, url: str) -> bool:
        a, b = urllib.parse.urlsplit(self.api_url), urllib.parse.urlsplit(url)
        return (a.scheme, a.netloc) == (b.scheme, b.netloc)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    # -- low level ----------------------------------------------------------
    def open(
        self,
        method: str,
        url: str,
        *,
        data: bytes | IO[bytes] | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        fatal: bool = True,
    ) -> http.client.HTTPResponse:
        """One attempt. Returns the open response (2xx/3xx followed).

        Raises RetryableError (network, timeout, 5xx, 429), FatalError
        (401/403/404, only for authenticated requests with ``fatal``) or
        HttpError.
        """
        hdrs = dict(headers or {})
        if auth:
            hdrs.update(self.auth_headers())
        req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
        try:
            return self._opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read().decode("utf-8", "replace")
            except Exception:
                body = ""
            finally:
                exc.close()
            if exc.code >= 500 or exc.code == 429:
                raise RetryableError(f"HTTP {exc.code} from {url}") from exc
            if auth and fatal and exc.code in FATAL_STATUSES:
                err = FatalError(exc.code, url, body)
                if self.fatal is None:
                    self.fatal = err
                self.fatal_event.set()
                raise err from exc
            raise HttpError(exc.code, url, body) from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RetryableError(f"{method} {url}: {reason}") from exc

    def retrying(
        self,
        op: Callable[[], T],
        what: str,
        *,
        interrupted: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> T:
        """Run ``op`` until it does not raise RetryableError.

        Stops with GiveUp when ``deadline`` (or ``self.deadline``) passes or
        ``interrupted()`` becomes true. At least one attempt is always made.
        """
        attempt = 0
        while True:
            try:
                result = op()
            except RetryableError as exc:
                limit = deadline if deadline is not None else self.deadline
                now = time.monotonic()
                if limit is not None and now >= limit:
                    raise GiveUp(f"{what}: giving up: {exc}") from exc
                delay = min(BACKOFF_CAP, BACKOFF_BASE * (2**attempt))
                delay = random.uniform(delay / 2, delay)
                if limit is not None:
                    delay = min(delay, max(0.0, limit - now))
                attempt = min(attempt + 1, 16)
                self._warn(f"{what} failed ({exc}); retrying in {delay:.1f} s")
                end = time.monotonic() + delay
                while True:
                    if interrupted is not None and interrupted():
                        raise GiveUp(f"{what}: interrupted") from exc
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    time.sleep(min(left, 0.05))
                continue
            self._recovered()
            return result

    def _warn(self, msg: str) -> None:
        now = time.monotonic()
        with self._warn_lock:
            if self._failing_since is None:
                self._failing_since = now
            elif now - self._last_warn < 10.0:
                return
            self._last_warn = now
        log_stderr(msg)

    def _recovered(self) -> None:
        with self._warn_lock:
            since, self._failing_since = self._failing_since, None
        if since is not None:
            log_stderr(f"server reachable again after {time.monotonic() - since:.1f} s")

    # -- JSON ------------------------------------------------------------------
    def json_once(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        url = self.url(path)
        resp = self.open(method, url, data=data, headers=headers)
        with resp:
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                raise RetryableError(f"{method} {url}: {exc}") from exc
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise HttpError(resp.status, url, f"invalid JSON response: {raw[:200]!r}") from exc

    def json(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        retry: bool = True,
        interrupted: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> Any:
        if not retry:
            return self.json_once(method, path, body)
        return self.retrying(
            lambda: self.json_once(method, path, body),
            f"{method} {path}",
            interrupted=interrupted,
            deadline=deadline,
        )

    def put_file(
        self, path: str, open_file: Callable[[], BinaryIO], size: int, headers: dict[str, str]
    ) -> Any:
        """PUT a file streamed from disk; `open_file` opens it again on every retry (for a
        job's file: a descriptor from executor.safefs, never a path reopened by name)."""

        def op() -> Any:
            hdrs = dict(headers)
            hdrs["Content-Type"] = "application/octet-stream"
            hdrs["Content-Length"] = str(size)
            url = self.url(path)
            with open_file() as fh:
                resp = self.open("PUT", url, data=fh, headers=hdrs)
                with resp:
                    try:
                        resp.read()
                    except (OSError, http.client.HTTPException) as exc:
                        raise RetryableError(f"PUT {url}: {exc}") from exc
            return None

        return self.retrying(op, f"PUT {path}")
