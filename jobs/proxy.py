"""The way into a job's JupyterLab: Gantry is a reverse proxy in front of it.

JupyterLab listens on 127.0.0.1 (or its pod) with a random token and
``--ServerApp.base_url=/jobs/<id>/lab/``. Browsers never talk to it directly:
every request goes to ``/jobs/<id>/lab/...`` on Gantry, which checks that the
user may view the job, adds ``Authorization: token <token>`` and relays the
request (this module: HTTP; `jobs.proxy_consumers`: websockets). Because the
base URL is the same on both sides, no link in a page needs rewriting.

The token never leaves the server. JupyterLab writes it into the page config of
its HTML pages (``page_config["token"]`` in jupyterlab/labapp.py), so textual
response bodies are relayed with the token bytes removed (streamed, chunk by
chunk, never buffered whole); its frontend then sends no token of its own, and
we add it. That is the only change made to a body.

CSRF, and why this view keeps it. A user reaches the notebook with the Gantry
session cookie, which a browser attaches to cross-site requests too, so a
cross-site POST to ``/jobs/<id>/lab/api/kernels/...`` must not be able to start
or drive a kernel. Jupyter's own XSRF check does not help here: Jupyter skips
it for token-authenticated requests (``JupyterHandler.check_xsrf_cookie``
returns early when ``self.token_authenticated``), and every request this proxy
sends upstream is token-authenticated. So Django's CSRF protection stays on for
unsafe methods: the Origin (and, over HTTPS, Referer) checks and the
cookie/token comparison of `CsrfViewMiddleware`, run by `_csrf_rejection`.
Two adaptations let JupyterLab's own frontend pass it unchanged:

* JupyterLab sends the value of its ``_xsrf`` cookie as ``X-XSRFToken``; the
  proxy sets ``_xsrf`` (path ``/jobs/<id>/lab/``) to Django's CSRF token on the
  HTML pages it relays, and accepts ``X-XSRFToken`` wherever Django would read
  ``X-CSRFToken``.
* The token is read from headers only, never from a form body, because the
  body is relayed untouched (Django would otherwise parse a urlencoded or
  multipart body looking for ``csrfmiddlewaretoken``). So the view is
  `csrf_exempt` for the middleware and runs the same check itself.

Cookies go neither way: Gantry's cookies (session, CSRF, ``_xsrf``, language,
messages) are not forwarded upstream, and the ``Set-Cookie`` headers Jupyter
sends are dropped, since user code runs behind this proxy (e.g. apps behind
jupyter-server-proxy) and must not be able to set cookies, such as
``csrftoken`` or ``sessionid``, on Gantry's origin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import NamedTuple

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse, QueryDict, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.utils.datastructures import MultiValueDict
from django.utils.encoding import escape_uri_path
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.csrf import csrf_exempt

from projects.permissions import get_object_for_user

logger = logging.getLogger(__name__)

# connect: a notebook that does not accept a connection in 5 s is down or gone;
# read: starting a kernel or saving a large notebook can take a while.
TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=60.0, pool=5.0)
BODY_CHUNK = 64 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
XSRF_COOKIE = "_xsrf"  # the cookie JupyterLab's frontend reads its XSRF token from

# RFC 9110 section 7.6.1, plus the ones proxies conventionally drop.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Request headers Gantry answers for itself or replaces. Origin and Referer are
# checked here (CSRF) and would make Jupyter's own origin check refuse the
# request, since its Host is 127.0.0.1:<port>.
NOT_FORWARDED_UPSTREAM = HOP_BY_HOP | {
    "host",
    "content-length",
    "authorization",
    "cookie",
    "origin",
    "referer",
    "x-csrftoken",
    "x-xsrftoken",
    "accept-encoding",
}
# Date and Server are the ASGI server's to send, once.
NOT_RETURNED = HOP_BY_HOP | {"set-cookie", "content-length", "date", "server"}
TEXTUAL_TYPES = ("text/", "application/json", "application/javascript", "application/xml")


class NotebookTarget(NamedTuple):
    """Where a notebook server listens, and how to get in."""

    host: str
    port: int
    token: str
    base_url: str  # "/jobs/<id>/lab/", the same path Gantry serves it under

    def url(self, scheme: str, path: str, query: str = "") -> str:
        base = self.base_url if self.base_url.endswith("/") else self.base_url + "/"
        host = f"[{self.host}]" if ":" in self.host else self.host
        url = f"{scheme}://{host}:{self.port}{base}{escape_uri_path(path)}"
        return f"{url}?{query}" if query else url


# --- What the jobs app provides; tests substitute these three. ---------------


def get_job_for_user(user, pk: int):
    """The job, if `user` may view it; Http404 otherwise (the matrix's `job.view`)."""
    from jobs.models import Job

    return get_object_for_user(user, Job, "job.view", pk=pk)


def resolve_target(job) -> NotebookTarget | None:
    """Where the job's notebook listens, or None when it is not a running notebook."""
    from jobs.services import notebook_target

    found = notebook_target(job)
    return None if found is None else NotebookTarget(*found)


def record_activity(job) -> None:
    """Tell the jobs app the notebook is in use: idle notebooks are stopped."""
    from jobs.services import touch_notebook

    touch_notebook(job)


# Job pk -> when its activity was last recorded by this process (time.monotonic()).
_recorded: dict[int, float] = {}
RECORD_EVERY = 30.0  # seconds; the idle limit is counted in minutes


def activity_due(pk: int) -> bool:
    """True at most once every RECORD_EVERY seconds per job (no database involved)."""
    now = time.monotonic()
    if now - _recorded.get(pk, float("-inf")) < RECORD_EVERY:
        return False
    _recorded[pk] = now
    return True


def lookup(user, pk: int):
    """(job, target) for a user who may view job `pk`, noting the activity (sync: queries).

    Raises Http404 for a job the user may not see or one with no running notebook.
    """
    job = get_job_for_user(user, pk)
    target = resolve_target(job)
    if target is None:
        raise Http404("This job has no running notebook.")
    if activity_due(pk):
        record_activity(job)
    return job, NotebookTarget(*target)


# --- The HTTP view ------------------------------------------------------------


def _not_answering() -> HttpResponse:
    return HttpResponse(
        "<!doctype html><title>Notebook not answering</title>"
        "<h1>The notebook is not answering</h1>"
        "<p>Its server did not respond. It may still be starting, or it has stopped; "
        "try again in a moment or look at the job's log.</p>",
        status=502,
    )


def _csrf_rejection(request) -> HttpResponse | None:
    """Django's own CSRF check, reading the token from headers only (see the module docstring)."""
    if settings.CSRF_HEADER_NAME not in request.META and "HTTP_X_XSRFTOKEN" in request.META:
        request.META[settings.CSRF_HEADER_NAME] = request.META["HTTP_X_XSRFTOKEN"]
    # An empty form, so that the check never parses (and consumes) the body it relays.
    request._post, request._files = QueryDict(), MultiValueDict()
    return CsrfViewMiddleware(lambda request: None).process_view(request, _checked, (), {})


def _checked(request):  # the callback `process_view` inspects (not csrf_exempt)
    raise AssertionError("never called")


def _upstream_headers(request, target: NotebookTarget) -> dict[str, str]:
    connection_listed = {
        name.strip().lower() for name in request.headers.get("Connection", "").split(",")
    }
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in NOT_FORWARDED_UPSTREAM and name.lower() not in connection_listed
    }
    gantry_cookies = {
        settings.SESSION_COOKIE_NAME,
        settings.CSRF_COOKIE_NAME,
        settings.LANGUAGE_COOKIE_NAME,
        "messages",
        XSRF_COOKIE,
    }
    cookies = [
        part.strip()
        for part in request.META.get("HTTP_COOKIE", "").split(";")
        if part.strip() and part.split("=", 1)[0].strip() not in gantry_cookies
    ]
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
    headers["Authorization"] = f"token {target.token}"
    # Plain bytes, so that the token can be found and removed in what comes back.
    headers["Accept-Encoding"] = "identity"
    return headers


async def _request_body(request) -> AsyncIterator[bytes]:
    # ASGI servers hand Django the whole body first (spooled to disk when large);
    # relaying it in chunks keeps it out of memory.
    while chunk := request.read(BODY_CHUNK):
        yield chunk


async def _without(chunks: AsyncIterator[bytes], secret: bytes) -> AsyncIterator[bytes]:
    """The stream with every occurrence of `secret` removed, even across chunk borders."""
    keep = len(secret) - 1  # a secret cut by a border has at most this much in one chunk
    tail = b""
    async for chunk in chunks:
        data = (tail + chunk).replace(secret, b"")
        cut = max(0, len(data) - keep)
        if cut:
            yield data[:cut]
        tail = data[cut:]
    if tail:
        yield tail


async def _relay(upstream: httpx.Response, client: httpx.AsyncClient, secret: bytes | None):
    try:
        chunks = upstream.aiter_raw()
        if secret:
            chunks = _without(chunks, secret)
        async for chunk in chunks:
            yield chunk
    except httpx.TransportError as exc:
        # The status line is gone; breaking the connection tells the browser it is cut short.
        logger.warning("notebook response broke off: %s", exc)
        raise
    finally:
        await upstream.aclose()
        await client.aclose()


async def _response_from(
    request, upstream: httpx.Response, client: httpx.AsyncClient, target: NotebookTarget
) -> HttpResponse | StreamingHttpResponse:
    content_type = upstream.headers.get("content-type", "")
    textual = content_type.startswith(TEXTUAL_TYPES)
    status = upstream.status_code
    if request.method == "HEAD" or status < 200 or status in (204, 304):
        # Nothing to relay: let go of the connection now.
        await upstream.aclose()
        await client.aclose()
        response = HttpResponse(status=status)
    else:
        secret = target.token.encode() if textual and target.token else None
        response = StreamingHttpResponse(_relay(upstream, client, secret), status=status)
    response.reason_phrase = upstream.reason_phrase or response.reason_phrase
    if not content_type:
        del response.headers["Content-Type"]
    origin = f"http://{target.host}:{target.port}"
    combined: dict[str, list[str]] = {}
    for name, value in upstream.headers.multi_items():
        name = name.lower()
        if name in NOT_RETURNED:
            continue
        if name == "location" and value.startswith(origin):
            value = value[len(origin) :] or "/"
        combined.setdefault(name, []).append(value)
    for name, values in combined.items():
        response.headers[name] = ", ".join(values)
    if not textual and "content-length" in upstream.headers:
        # Relayed byte for byte, so the length holds (and downloads show progress).
        response.headers["Content-Length"] = upstream.headers["content-length"]
    return response


@csrf_exempt  # not unprotected: `_csrf_rejection` runs Django's check itself
@xframe_options_sameorigin  # JupyterLab frames its own pages (and Gantry may frame it)
async def notebook_proxy(request, pk: int, path: str = ""):
    """Relay one request to the JupyterLab of job `pk`, for users who may view the job."""
    user = await request.auser()
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if request.method not in SAFE_METHODS:
        rejection = _csrf_rejection(request)
        if rejection is not None:
            return rejection
    _, target = await sync_to_async(lookup)(user, pk)

    headers = _upstream_headers(request, target)
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit():
        headers["Content-Length"] = length
        content = _request_body(request) if int(length) else None
    else:  # no length: nothing for a safe method, else a chunked body
        content = None if request.method in SAFE_METHODS else _request_body(request)
    client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False)
    upstream_request = client.build_request(
        request.method,
        target.url("http", path, request.META.get("QUERY_STRING", "")),
        headers=headers,
        content=content,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except httpx.TransportError as exc:
        await client.aclose()
        logger.warning("notebook of job %s is not answering: %r", pk, exc)
        return _not_answering()

    response = await _response_from(request, upstream, client, target)
    if response.headers.get("Content-Type", "").startswith("text/html"):
        # The pages JupyterLab starts from: give its frontend Django's CSRF token.
        response.set_cookie(
            XSRF_COOKIE,
            get_token(request),
            path=request.path[: len(request.path) - len(path)],
            secure=settings.CSRF_COOKIE_SECURE,
            httponly=False,  # JupyterLab reads it from document.cookie
            samesite=settings.CSRF_COOKIE_SAMESITE,
        )
    return response


# For the generated access tests: the rule this view applies (through `lookup`).
notebook_proxy.permission_action = "job.view"
notebook_proxy.model_label = "jobs.Job"
