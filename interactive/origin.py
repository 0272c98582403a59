"""The notebook origin: every running notebook's JupyterLab, each on a host of its own.

An ASGI application of its own (``uvicorn interactive.origin:application``; `manage.py
serve` starts it on GANTRY_NOTEBOOK_PORT). Why notebooks need their own origin, how a
user enters with a ticket, and the checks made on every request are in `interactive.proxy`.

It is fully async: a request waiting on a notebook holds no thread, only a coroutine,
and at most PER_USER of one user's and PER_NOTEBOOK of one notebook's requests are in
flight at once (a request that finds no free slot within the timeout answers 503).
A notebook that does not answer within GANTRY_NOTEBOOK_TIMEOUT_SECONDS answers 504; one
that refuses the connection (still starting), 503 with a page that reloads by itself.
Django's ORM is reached through sync_to_async for the access checks only; none of Gantry's
middleware, sessions or pages run here.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import os
import secrets
import weakref
from urllib.parse import parse_qs, quote, urlencode

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django
from django.apps import apps

if not apps.ready:
    django.setup()

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.http.cookie import parse_cookie

from interactive import proxy, tensorboard
from interactive.proxy_consumers import NotebookProxyConsumer

logger = logging.getLogger(__name__)

PER_USER = 16  # requests in flight per user (browsers open at most 6 per host anyway)
PER_NOTEBOOK = 32  # requests in flight per notebook, all its users together
CONNECT_SECONDS = 3.0  # a notebook that does not accept a connection in 3 s is down
# Starting (or restarting) a kernel waits for the kernel process to come up.
SLOW_SECONDS = 60.0


def _slow(method: str, path: str) -> bool:
    return method == "POST" and (
        path in ("api/sessions", "api/kernels", "api/terminals") or path.endswith("/restart")
    )


def _timeout(method: str, path: str) -> httpx.Timeout:
    read = SLOW_SECONDS if _slow(method, path) else settings.GANTRY_NOTEBOOK_TIMEOUT_SECONDS
    return httpx.Timeout(connect=CONNECT_SECONDS, read=read, write=read, pool=CONNECT_SECONDS)


class Busy(Exception):
    """No free slot for this user or notebook within the timeout."""


class Slots:
    """Requests in flight per key (a user, a notebook), each key bounded by a semaphore."""

    def __init__(self):
        self._held: dict[tuple, list] = {}  # key -> [semaphore, requests holding or waiting]

    @contextlib.asynccontextmanager
    async def hold(self, key: tuple, size: int, wait: float):
        entry = self._held.setdefault(key, [asyncio.Semaphore(size), 0])
        entry[1] += 1
        try:
            try:
                await asyncio.wait_for(entry[0].acquire(), timeout=wait)
            except TimeoutError:
                raise Busy from None
            try:
                yield
            finally:
                entry[0].release()
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._held[key]


# Per event loop: asyncio primitives and httpx clients belong to the loop they run in.
_slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _loop_slots() -> Slots:
    loop = asyncio.get_running_loop()
    if loop not in _slots:
        _slots[loop] = Slots()
    return _slots[loop]


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    if loop not in _clients:
        _clients[loop] = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
    return _clients[loop]


@contextlib.asynccontextmanager
async def _in_flight(user: int, job: int):
    slots, wait = _loop_slots(), settings.GANTRY_NOTEBOOK_TIMEOUT_SECONDS
    async with (
        slots.hold(("user", user), PER_USER, wait),
        slots.hold(("job", job), PER_NOTEBOOK, wait),
    ):
        yield


# --- Small ASGI helpers -------------------------------------------------------------------


def _headers(scope) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]


def _header(headers, name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _cookie(name: str, value: str, max_age: int, *, http_only: bool = True) -> tuple[bytes, bytes]:
    parts = [f"{proxy.cookie_name(name) if name != proxy.XSRF_COOKIE else name}={value}"]
    parts += ["Path=/", f"Max-Age={max_age}", "SameSite=Lax"]
    if http_only:
        parts.append("HttpOnly")
    if proxy.origin_is_https():
        parts.append("Secure")
    return b"set-cookie", "; ".join(parts).encode("latin-1")


async def _respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = ()):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                (b"referrer-policy", b"no-referrer"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _page(
    send,
    status: int,
    title: str,
    text: str,
    link: tuple[str, str] | None = None,
    headers: list[tuple[bytes, bytes]] = (),
):
    more = f'<p><a href="{html.escape(link[0])}">{html.escape(link[1])}</a></p>' if link else ""
    body = (
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{more}"
    ).encode()
    await _respond(
        send,
        status,
        body,
        [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
            *headers,
        ],
    )


async def _redirect(send, location: str, cookies: list[tuple[bytes, bytes]] = ()):
    await _respond(send, 302, b"", [(b"location", location.encode("latin-1")), *cookies])


def _gantry_job_link(pk: int) -> tuple[str, str]:
    return f"{settings.GANTRY_URL}/jobs/{pk}/", "Go to the job in Gantry"


async def _read_body(receive):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            return


# --- HTTP -------------------------------------------------------------------------------


async def _http(scope, receive, send):
    headers = _headers(scope)
    pk = proxy.job_of_host(_header(headers, "host") or "")
    if pk is None:
        return await _page(send, 404, "Not found", "No notebook is served under this name.")
    path, method = scope["path"], scope["method"]
    cookies = parse_cookie(_header(headers, "cookie") or "")
    if path == proxy.ENTER_PATH:
        return await _enter(scope, send, pk, cookies)
    base = f"/jobs/{pk}/lab/"
    if path == base[:-1] or path == "/":
        return await _redirect(send, base)
    # The job's TensorBoard (interactive.tensorboard) is served beside its notebook, same rule.
    app = "tensorboard" if path.startswith(f"/jobs/{pk}/tensorboard") else "lab"
    if app == "tensorboard":
        base = f"/jobs/{pk}/tensorboard/"
        if path == base[:-1]:
            return await _redirect(send, base)
    if not path.startswith(base):
        return await _page(send, 404, "Not found", "There is nothing at this address.")
    sub = path[len(base) :]

    session = proxy.read_session(cookies.get(proxy.cookie_name(proxy.SESSION_COOKIE)), pk)
    if session is None:
        if method in ("GET", "HEAD") and not sub.startswith("api/"):
            return await _start_entry(send, pk, sub, cookies, app)
        return await _page(
            send,
            403,
            "Not signed in",
            "Open this notebook from its job page in Gantry.",
            _gantry_job_link(pk),
        )
    if method not in proxy.SAFE_METHODS:
        if _header(headers, "origin") != proxy.notebook_origin(pk):
            return await _page(send, 403, "Forbidden", "Cross-origin request refused.")
        sent = _header(headers, "x-xsrftoken") or _header(headers, "x-csrftoken")
        # TensorBoard's frontend sends no token (only X-XSRF-Protected, which TensorBoard
        # itself requires); the exact Origin above is what keeps other sites out there.
        if app == "lab" and not proxy.xsrf_matches(session, sent):
            return await _page(send, 403, "Forbidden", "The XSRF token is missing or wrong.")
    try:
        _, target = await sync_to_async(proxy.lookup)(session.user, pk, session.auth_hash, app)
    except PermissionDenied:
        return await _page(
            send, 403, "Forbidden", "You may not use this notebook.", _gantry_job_link(pk)
        )
    except Http404:
        missing = (
            "This job has no running notebook."
            if app == "lab"
            else "This job has written no TensorBoard event files."
        )
        return await _page(send, 404, "Not found", missing, _gantry_job_link(pk))
    try:
        async with _in_flight(session.user, pk):
            await _relay(scope, receive, send, headers, target, session, sub)
    except Busy:
        await _page(
            send,
            503,
            "Notebook busy",
            "Too many requests to this notebook are waiting for it; try again shortly.",
        )


async def _start_entry(send, pk: int, sub: str, cookies, app: str = "lab"):
    """No notebook session: get a ticket from Gantry, for this browser (the state cookie)."""
    state = cookies.get(proxy.cookie_name(proxy.STATE_COOKIE), "")
    if not proxy._STATE.fullmatch(state):
        state = secrets.token_urlsafe(32)
    query = urlencode({"state": state, **({"path": sub} if proxy.clean_path(sub) else {})})
    entry = "tensorboard" if app == "tensorboard" else "notebook"
    await _redirect(
        send,
        f"{settings.GANTRY_URL}/jobs/{pk}/{entry}/?{query}",
        [_cookie(proxy.STATE_COOKIE, state, proxy.STATE_SECONDS)],
    )


async def _enter(scope, send, pk: int, cookies):
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    ticket = (query.get("ticket") or [""])[0]
    state = cookies.get(proxy.cookie_name(proxy.STATE_COOKIE))
    again = (f"{settings.GANTRY_URL}/jobs/{pk}/", "Open it again from Gantry")
    try:
        user, auth_hash, path = await sync_to_async(proxy.redeem_ticket)(ticket, state, pk)
    except proxy.TicketRefused as refused:
        return await _page(send, 403, "Link not valid", str(refused), again)
    except PermissionDenied:
        return await _page(send, 403, "Forbidden", "You may not use this notebook.", again)
    except Http404:
        return await _page(send, 404, "Not found", "This job has no running notebook.", again)
    session = proxy.make_session(user, auth_hash, pk)
    await _redirect(
        send,
        f"/jobs/{pk}/{quote(path, safe='/')}",
        [
            _cookie(proxy.SESSION_COOKIE, session, proxy.SESSION_SECONDS),
            _cookie(proxy.STATE_COOKIE, "", 0),
        ],
    )


async def _relay(scope, receive, send, headers, target: proxy.NotebookTarget, session, sub: str):
    upstream_headers = proxy.upstream_headers(headers, target.token)
    length = _header(headers, "content-length")
    if length is not None and length.isdigit():
        upstream_headers["Content-Length"] = length
        content = _read_body(receive) if int(length) else None
    elif _header(headers, "transfer-encoding"):
        content = _read_body(receive)
    else:
        content = None
    if not target.uds:
        return await _relay_with(
            _client(), scope, send, upstream_headers, content, target, session, sub
        )
    # The local backend's notebook: over its Unix socket, a connection per request (the
    # socket is checked each time, see proxy.open_notebook_socket).
    try:
        fd = proxy.open_notebook_socket(target)
    except OSError as exc:
        logger.warning("notebook of job %s is not answering: %r", session.job, exc)
        return await _not_answering(send, session, target)
    client = httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=f"/proc/self/fd/{fd}", verify=False),
        follow_redirects=False,
        trust_env=False,
    )
    try:
        return await _relay_with(
            client, scope, send, upstream_headers, content, target, session, sub
        )
    finally:
        os.close(fd)
        await client.aclose()


async def _not_answering(send, session, target=None):
    """The server behind a running job refused the connection: it is still starting (a
    notebook's JupyterLab listens a few seconds after its process starts; TensorBoard is
    started on demand by interactive.tensorboard) or it has just stopped. 503 with Retry-After, and
    a page that reloads by itself, so a browser shows the server once it answers."""
    retry = [(b"refresh", b"2"), (b"retry-after", b"2")]
    if target is not None and target.base_url.endswith("/tensorboard/"):
        return await _page(
            send,
            503,
            "Starting TensorBoard",
            "It reads the job's event files; this page reloads by itself in a moment.",
            headers=retry,
        )
    return await _page(
        send,
        503,
        "Notebook starting",
        "JupyterLab is not answering yet. It takes a few seconds to start; this page "
        "reloads by itself. If it never comes, the job's log in Gantry says why.",
        _gantry_job_link(session.job),
        headers=retry,
    )


async def _relay_with(client, scope, send, upstream_headers, content, target, session, sub):
    method = scope["method"]
    query = scope.get("query_string", b"").decode("latin-1")
    request = client.build_request(
        method,
        target.url("http", sub, query),
        headers=upstream_headers,
        content=content,
        timeout=_timeout(method, sub),
    )
    try:
        upstream = await client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        seconds = request.extensions["timeout"]["read"]
        logger.warning("notebook of job %s did not answer in time: %r", session.job, exc)
        return await _page(
            send,
            504,
            "Notebook not answering",
            f"The notebook did not answer within {seconds:g} seconds. It may be busy or "
            "stopped; try again in a moment or look at the job's log in Gantry.",
            _gantry_job_link(session.job),
        )
    except httpx.TransportError as exc:
        logger.warning("notebook of job %s is not answering: %r", session.job, exc)
        return await _not_answering(send, session, target)
    try:
        await _send_response(send, method, upstream, target, session)
    finally:
        await upstream.aclose()


async def _send_response(send, method, upstream: httpx.Response, target, session):
    content_type = upstream.headers.get("content-type", "")
    textual = content_type.startswith(proxy.TEXTUAL_TYPES)
    status = upstream.status_code
    upstream_origin = target.origin
    out: list[tuple[bytes, bytes]] = []
    for name, value in upstream.headers.multi_items():
        name = name.lower()
        if name in proxy.NOT_RETURNED:
            continue
        if name == "location" and value.startswith(upstream_origin):
            value = value[len(upstream_origin) :] or "/"
        out.append((name.encode("latin-1"), value.encode("latin-1")))
    if not textual and "content-length" in upstream.headers:
        # Relayed byte for byte, so the length holds (and downloads show progress).
        out.append((b"content-length", upstream.headers["content-length"].encode("latin-1")))
    if content_type.startswith("text/html"):
        # The pages JupyterLab starts from: its frontend echoes this in X-XSRFToken.
        out.append(_cookie(proxy.XSRF_COOKIE, session.xsrf, proxy.SESSION_SECONDS, http_only=False))
    await send({"type": "http.response.start", "status": status, "headers": out})
    if method == "HEAD" or status < 200 or status in (204, 304):
        return await send({"type": "http.response.body", "body": b""})
    chunks = upstream.aiter_raw()
    if textual and target.token:
        chunks = proxy.without(chunks, target.token.encode())
    try:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.TransportError as exc:
        # The status line is gone; breaking the connection tells the browser it is cut short.
        logger.warning("notebook response of job %s broke off: %r", session.job, exc)
        raise
    await send({"type": "http.response.body", "body": b""})


# --- Websockets -------------------------------------------------------------------------

_consumer = NotebookProxyConsumer.as_asgi()


async def _websocket(scope, receive, send):
    headers = _headers(scope)
    pk = proxy.job_of_host(_header(headers, "host") or "")
    session = None
    if pk is not None:
        cookies = parse_cookie(_header(headers, "cookie") or "")
        session = proxy.read_session(cookies.get(proxy.cookie_name(proxy.SESSION_COOKIE)), pk)
    base = f"/jobs/{pk}/lab/"
    if (
        session is None
        or not scope["path"].startswith(base)
        # Cross-site websocket hijacking: a page of another origin (a sibling notebook
        # of the same site included) must not open a socket with this cookie.
        or _header(headers, "origin") != proxy.notebook_origin(pk)
    ):
        await receive()  # websocket.connect
        # Closed before it is accepted: the server answers the handshake with HTTP 403.
        return await send({"type": "websocket.close", "code": 4403})
    scope = {**scope, "notebook": {"session": session, "path": scope["path"][len(base) :]}}
    return await _consumer(scope, receive, send)


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            for client in list(_clients.values()):
                await client.aclose()
            # The TensorBoards this origin started go with it (interactive/tensorboard.py).
            await asyncio.to_thread(tensorboard.stop_servers)
            return await send({"type": "lifespan.shutdown.complete"})


async def application(scope, receive, send):
    """The notebook origin's ASGI application."""
    if scope["type"] == "http":
        return await _http(scope, receive, send)
    if scope["type"] == "websocket":
        return await _websocket(scope, receive, send)
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    raise ValueError(f"unknown ASGI scope type {scope['type']!r}")
