"""The way into a job's JupyterLab: its own origin, a ticket, and a reverse proxy.

A notebook shows whatever its files hold, and anyone who may write them can make
a page that runs script in the browser of whoever opens it. So notebooks are not
served from Gantry's origin, where such a script would carry the user's Gantry
session. Each running notebook has an origin of its own, `GANTRY_NOTEBOOK_ORIGIN`
with `{job}` replaced by the job's id (``http://7.nb.localhost:8001`` by default,
``https://7.nb.lab.example`` in production), served by `interactive.origin`, a
small ASGI application that is nothing but this proxy: no Django session, no
Gantry cookie, no Gantry page. Gantry's cookies are host-only (no Domain), so a
browser never sends them there.

Entering, as JupyterHub's subdomain mode does with its OAuth hand-off:

1. The browser opens ``<notebook origin>/jobs/<id>/lab/...`` with no notebook
   session. The origin sets a random `state` cookie (host-only) and redirects to
   Gantry's ``/jobs/<id>/notebook/?state=...&path=...`` (`notebook_open`).
2. Gantry, with the user's session, checks `job.exec` (the job's submitter and
   project maintainers; never viewers) and that the job is a running notebook,
   and redirects back to ``<notebook origin>/_gantry/enter?ticket=...``. The
   ticket is signed (django.core.signing, salted), lives 60 seconds, names one
   user, one job and the `state`, and carries a nonce.
3. The origin redeems it: the signature and age, the job of this host, the
   `state` cookie of this browser (so a ticket seen elsewhere opens nothing, and
   nobody can push their own notebook session into someone else's browser), the
   nonce never seen before (a `NotebookTicket` row: one redemption, whichever
   process it reaches), and `job.exec` once more. It then sets the notebook
   session cookie, host-only, HttpOnly, SameSite=Lax (Secure and ``__Host-`` over
   https), signed, for this user and this job, and redirects to drop the ticket
   from the address bar.

Every request and websocket on the origin re-reads that cookie and checks
`job.exec` in the database again (a removed member or a demoted submitter is out
at the next request; open websockets are re-checked every
GANTRY_WS_RECHECK_SECONDS), and the user's password must not have changed since.

CSRF. Jupyter skips its own XSRF check for token-authenticated requests, and
every request the proxy sends upstream carries the token, so the origin checks
unsafe methods itself: the Origin header must be this notebook's origin, and
``X-XSRFToken`` must equal the secret held in the notebook session (JupyterLab's
frontend sends its ``_xsrf`` cookie's value there; the proxy sets that cookie on
the HTML pages it relays). Other notebooks of the same site cannot send that
header cross-origin, nor learn the value.

The Jupyter token never leaves the server: it is added upstream, and removed from
textual bodies (JupyterLab writes it into its page config), streamed chunk by
chunk. ``Set-Cookie`` from upstream is dropped (apps behind the notebook must not
set cookies on the origin, e.g. the session's name).

A stalled notebook stalls no one else: the origin is fully async (no thread is
held while it waits), each user and each notebook has a bounded number of
requests in flight, and a notebook that does not answer within
GANTRY_NOTEBOOK_TIMEOUT_SECONDS gets a 504. Gantry's own web processes never
proxy notebooks at all.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import NamedTuple
from urllib.parse import quote, urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core import checks, signing
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, close_old_connections, transaction
from django.http import Http404, HttpResponseRedirect
from django.utils import timezone
from django.utils.encoding import escape_uri_path

from projects.permissions import get_object_for_user

logger = logging.getLogger(__name__)

BODY_CHUNK = 64 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
XSRF_COOKIE = "_xsrf"  # the cookie JupyterLab's frontend reads its XSRF token from
TICKET_SECONDS = 60
SESSION_SECONDS = 12 * 3600
STATE_SECONDS = 600
ENTER_PATH = "/_gantry/enter"
TICKET_SALT = "gantry.notebook.ticket"
SESSION_SALT = "gantry.notebook.session"
_STATE = re.compile(r"[A-Za-z0-9_-]{32,64}")

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
# Request headers the origin answers for itself or replaces. Origin and Referer are
# checked here (CSRF) and would make Jupyter's own origin check refuse the request.
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
    """Where a notebook server listens, and how to get in: host and port (Kubernetes),
    or a Unix socket (the local backend: JupyterLab runs in its job's network namespace,
    out of reach by port), owned by `uid`."""

    host: str
    port: int
    token: str
    base_url: str  # "/jobs/<id>/lab/", the same path the notebook origin serves it under
    uds: str = ""
    uid: int = -1

    @property
    def origin(self) -> str:
        """The upstream's own origin, as its Location headers may name it."""
        if self.uds:
            return "http://localhost"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url(self, scheme: str, path: str, query: str = "") -> str:
        base = self.base_url if self.base_url.endswith("/") else self.base_url + "/"
        url = scheme + self.origin.removeprefix("http") + base + escape_uri_path(path)
        return f"{url}?{query}" if query else url


def open_notebook_socket(target: NotebookTarget) -> int:
    """An O_PATH descriptor of the notebook's Unix socket, for connecting to
    ``/proc/self/fd/<fd>``; OSError when it is not there or not the notebook's.

    The socket lies in the job's workdir, which the job owns: it could put a symbolic
    link there to a socket of the host's (a container engine's, a database's), which
    Gantry, as root, would follow and send the user's requests to. So the last
    component is not followed, and it must be a socket of the notebook's own user (a job
    cannot make one of another user's: it sees no other socket to link). Connecting
    through the descriptor checks and connects the same inode, and keeps the address
    short whatever the workdir's length."""
    fd = os.open(target.uds, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != target.uid:
        os.close(fd)
        raise ConnectionRefusedError(f"{target.uds} is not the notebook's socket")
    return fd


# --- Origins --------------------------------------------------------------------------


def notebook_origin(pk: int) -> str:
    """The origin job `pk`'s notebook is served from, e.g. http://7.nb.localhost:8001."""
    return settings.GANTRY_NOTEBOOK_ORIGIN.replace("{job}", str(int(pk)))


def origin_is_https() -> bool:
    return settings.GANTRY_NOTEBOOK_ORIGIN.startswith("https://")


def job_of_host(host: str) -> int | None:
    """The job whose notebook origin has this Host header, or None."""
    authority = settings.GANTRY_NOTEBOOK_ORIGIN.split("://", 1)[1]
    suffix = authority.replace("{job}", "", 1).lower()
    host = host.strip().lower()
    default_port = ":443" if origin_is_https() else ":80"
    if ":" not in suffix and host.endswith(default_port):
        host = host[: -len(default_port)]
    label = host[: -len(suffix)] if host.endswith(suffix) else ""
    if not label.isascii() or not label.isdigit() or label.startswith("0"):
        return None
    return int(label)


def lab_url(pk: int, path: str = "") -> str:
    """A page of job `pk`'s JupyterLab on its origin."""
    return f"{notebook_origin(pk)}/jobs/{int(pk)}/lab/{quote(path, safe='/')}"


def cookie_name(name: str) -> str:
    # Over https the __Host- prefix makes the browser refuse the cookie unless it is
    # Secure, host-only and Path=/: a sibling notebook cannot set it for this host.
    return f"__Host-{name}" if origin_is_https() else name


SESSION_COOKIE = "gantry_nb"
STATE_COOKIE = "gantry_nb_state"


def clean_path(path: str) -> str:
    """A path inside the lab to land on after entering ("" when it is not a plain one)."""
    if (
        len(path) > 1000
        or path.startswith("/")
        or "\\" in path
        or "//" in path
        or any(part in (".", "..") for part in path.split("/"))
        or any(ord(c) < 0x20 or c == "\x7f" for c in path)
    ):
        return ""
    return path


@checks.register(checks.Tags.security)
def check_notebook_origin(app_configs=None, **kwargs):
    """Gantry's cookies must never reach a notebook origin (the settings parse its form)."""
    errors = []
    host = settings.GANTRY_NOTEBOOK_ORIGIN.split("://", 1)[1].replace("{job}", "7", 1)
    host = host.rsplit(":", 1)[0].lower() if not host.endswith("]") else host.lower()
    for name in ("SESSION_COOKIE_DOMAIN", "CSRF_COOKIE_DOMAIN", "LANGUAGE_COOKIE_DOMAIN"):
        domain = (getattr(settings, name, None) or "").lower().lstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            errors.append(
                checks.Error(
                    f"{name} ({domain}) covers the notebook origins ({host}): Gantry's "
                    "cookies would reach every notebook.",
                    hint="Serve notebooks under a domain outside Gantry's cookie domain, "
                    "or leave the cookie domain unset (host-only cookies).",
                    id="jobs.E010",
                )
            )
    if settings.PRODUCTION and not origin_is_https():
        errors.append(
            checks.Warning(
                "GANTRY_NOTEBOOK_ORIGIN is plain http in production: notebook sessions "
                "travel unencrypted.",
                hint="Use https://{job}.nb.<your domain> with a wildcard certificate.",
                id="jobs.W011",
            )
        )
    return errors


# --- What the jobs app provides --------------------------------------------------------


def get_job_for_exec(user, pk: int):
    """The job, if `user` may attach to it (`job.exec`); Http404 / PermissionDenied."""
    from jobs.models import Job

    return get_object_for_user(user, Job, "job.exec", pk=pk)


def resolve_target(job) -> NotebookTarget | None:
    """Where the job's notebook listens, or None when it is not a running notebook."""
    from interactive.services import notebook_target

    if job.backend == "local":
        return _local_target(job)
    found = notebook_target(job)
    return None if found is None else NotebookTarget(*found)


def _local_target(job) -> NotebookTarget | None:
    """A local notebook: JupyterLab's Unix socket in rank 0's workdir, owned by the
    workdir's owner (the job's user when sandboxed, Gantry's otherwise)."""
    from jobs.compute.local import NOTEBOOK_SOCKET
    from jobs.models import JobKind, JobWorker
    from jobs.states import JobState

    if job.kind != JobKind.NOTEBOOK or job.state != JobState.RUNNING:
        return None
    worker = JobWorker.objects.filter(job=job, rank=0).first()
    if worker is None or not worker.workdir or not worker.notebook_token:
        return None
    try:
        uid = os.lstat(worker.workdir).st_uid
    except OSError:
        return None
    base = f"/jobs/{job.pk}/lab/"
    uds = os.path.join(worker.workdir, NOTEBOOK_SOCKET)
    return NotebookTarget("localhost", 0, worker.notebook_token, base, uds=uds, uid=uid)


def record_activity(job) -> None:
    """Tell the jobs app the notebook is in use: idle notebooks are stopped."""
    from interactive.services import touch_notebook

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


def _auth_hash(user) -> str:
    # Changes with the password, as Django's sessions do: a new password ends them.
    return user.get_session_auth_hash()[:20]


APPS = ("lab", "tensorboard")  # what the origin serves under /jobs/<id>/<app>/


def lookup(user_id: int, pk: int, auth_hash: str | None = None, app: str = "lab"):
    """(job, target) for an active user who may exec in job `pk`, noting the activity;
    `app` "tensorboard": the job's TensorBoard (interactive.tensorboard) instead of its notebook.

    Sync (queries). Raises PermissionDenied for a user who is gone, inactive, has
    changed password or may not exec here, Http404 for a job they may not see or one
    with no running notebook.
    """
    from django.contrib.auth import get_user_model

    close_old_connections()  # this runs outside Django's request cycle
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None or (
        auth_hash is not None and not hmac.compare_digest(auth_hash, _auth_hash(user))
    ):
        raise PermissionDenied("Open the notebook again from Gantry.")
    job = get_job_for_exec(user, pk)
    if app == "tensorboard":
        from interactive.tensorboard import tensorboard_target

        board = tensorboard_target(job)
        if board is None:
            raise Http404("This job has written no TensorBoard event files.")
        return job, board
    target = resolve_target(job)
    if target is None:
        raise Http404("This job has no running notebook.")
    if activity_due(pk):
        record_activity(job)
    return job, NotebookTarget(*target)


# --- Tickets and the notebook session --------------------------------------------------


class TicketRefused(Exception):
    """A ticket that opens nothing; the message says why, in words for the user."""


def mint_ticket(user, job, state: str, path: str = "", app: str = "lab") -> str:
    """A ticket for `user` into `job`'s notebook (or TensorBoard: `app`), for the browser
    holding `state`."""
    payload = {"u": user.pk, "j": job.pk, "n": secrets.token_urlsafe(24), "s": state, "p": path}
    if app != "lab":
        payload["a"] = app
    return signing.dumps(payload, salt=TICKET_SALT)


def redeem_ticket(ticket: str, state: str | None, pk: int) -> tuple[int, str, str]:
    """(user id, auth hash, path) of a good ticket into job `pk`; TicketRefused otherwise.
    The path is under /jobs/<pk>/: "lab/..." or "tensorboard/...".

    Sync (queries). A ticket is spent as soon as its signature checks out, even when
    the access check after it fails.
    """
    from interactive.models import NotebookTicket

    try:
        data = signing.loads(ticket, salt=TICKET_SALT, max_age=TICKET_SECONDS)
    except signing.SignatureExpired:
        raise TicketRefused("This notebook link has expired.") from None
    except signing.BadSignature:
        raise TicketRefused("This notebook link is not valid.") from None
    if data.get("j") != pk:
        raise TicketRefused("This notebook link is for another notebook.")
    if not state or not hmac.compare_digest(str(data.get("s", "")), state):
        raise TicketRefused("This notebook link was opened in another browser.")
    close_old_connections()
    now = timezone.now()
    NotebookTicket.objects.filter(
        redeemed_at__lt=now - timedelta(seconds=2 * TICKET_SECONDS)
    ).delete()
    try:
        with transaction.atomic():
            NotebookTicket.objects.create(nonce=data["n"], redeemed_at=now)
    except IntegrityError:
        raise TicketRefused("This notebook link has been used already.") from None
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(pk=data["u"], is_active=True).first()
    if user is None:
        raise TicketRefused("This notebook link is not valid.")
    app = data.get("a", "lab")
    if app not in APPS:
        raise TicketRefused("This notebook link is not valid.")
    lookup(user.pk, pk, app=app)  # Http404 / PermissionDenied: access went since it was minted
    return user.pk, _auth_hash(user), f"{app}/{clean_path(str(data.get('p', '')))}"


class NotebookSession(NamedTuple):
    user: int
    job: int
    auth_hash: str
    xsrf: str  # the value JupyterLab must echo in X-XSRFToken


def make_session(user_id: int, auth_hash: str, pk: int) -> str:
    payload = {"u": user_id, "j": pk, "h": auth_hash, "x": secrets.token_urlsafe(24)}
    return signing.dumps(payload, salt=SESSION_SALT)


def read_session(value: str | None, pk: int) -> NotebookSession | None:
    """The notebook session in a cookie's value, when it is good for job `pk`."""
    if not value:
        return None
    try:
        data = signing.loads(value, salt=SESSION_SALT, max_age=SESSION_SECONDS)
        session = NotebookSession(int(data["u"]), int(data["j"]), str(data["h"]), str(data["x"]))
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        return None
    return session if session.job == pk else None


def xsrf_matches(session: NotebookSession, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(sent.encode(), session.xsrf.encode())


# --- Headers and bodies -----------------------------------------------------------------


def upstream_headers(headers: list[tuple[str, str]], token: str) -> dict[str, str]:
    """The request headers to send to the notebook server: ours and hop-by-hop ones out,
    the origin's own cookies out, the Jupyter token in."""
    connection_listed = {
        part.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for part in value.split(",")
    }
    ours = {
        SESSION_COOKIE,
        STATE_COOKIE,
        cookie_name(SESSION_COOKIE),
        cookie_name(STATE_COOKIE),
        XSRF_COOKIE,
    }
    out: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower == "cookie":
            cookies += [
                part.strip()
                for part in value.split(";")
                if part.strip() and part.split("=", 1)[0].strip() not in ours
            ]
        elif lower not in NOT_FORWARDED_UPSTREAM and lower not in connection_listed:
            out[name] = f"{out[name]}, {value}" if name in out else value
    if cookies:
        out["Cookie"] = "; ".join(cookies)
    if token:  # a TensorBoard (interactive.tensorboard) has none: its socket is the access
        out["Authorization"] = f"token {token}"
    # Plain bytes, so that the token can be found and removed in what comes back.
    out["Accept-Encoding"] = "identity"
    return out


async def without(chunks: AsyncIterator[bytes], secret: bytes) -> AsyncIterator[bytes]:
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


# --- Gantry's side: minting the ticket --------------------------------------------------


def notebook_open(request, pk: int):
    """Send a user who may exec in job `pk` into its notebook origin with a ticket.

    Without `state` (a link from a Gantry page) the browser goes to the notebook origin
    first, which sets its state cookie and comes back here with it.
    """
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    job = get_job_for_exec(request.user, pk)
    if resolve_target(job) is None:
        raise Http404("This job has no running notebook.")
    path = clean_path(request.GET.get("path", ""))
    state = request.GET.get("state", "")
    if not _STATE.fullmatch(state):
        return HttpResponseRedirect(lab_url(job.pk, path))
    ticket = mint_ticket(request.user, job, state, path)
    response = HttpResponseRedirect(
        f"{notebook_origin(job.pk)}{ENTER_PATH}?{urlencode({'ticket': ticket})}"
    )
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


# For the generated access tests: the rule this view applies.
notebook_open.permission_action = "job.exec"
notebook_open.model_label = "jobs.Job"
