"""The gateway: /serve/<tenant>/<project>/<endpoint>/… in front of an endpoint's replicas.

Who may call: a personal API token (`Bearer gty_…`) or a signed-in session (the
endpoint page's "try it" form, CSRF-checked) of a user with `endpoint.predict` (viewers
and up), or an endpoint token (`Bearer gep_…`) of this endpoint and no other. Others
get 404, as for every object they cannot see.

What it passes on: the Open Inference Protocol (KServe v2) paths, `v2/…`, as they are,
and MLflow's scoring protocol: `invocations` (a JSON body of `inputs`, `instances`,
`dataframe_split` or `dataframe_records`) is translated here into one v2 tensor request
and the answer back into `{"predictions": …}`, and `ping` is the v2 readiness check.
Each answer names the version that gave it (`Gantry-Model-Version`). A payload the model
refuses is a 400 with the runtime's message; the runtime's 422 for a body that is not
the protocol's is a 400 too.

Per endpoint: a rate limit (requests per second, counted in Django's cache, so shared by
all web processes where the cache is Redis), and each request's status and timing
recorded (never bodies): totals per version and the last traffic.LOG_LENGTH
requests, written in batches off the request path (endpoints/traffic.py).

The view is async, so a request waiting on a model holds no thread. Who is calling and
what the endpoint serves is read from the database in a worker thread and kept for
admissions.TTL seconds (endpoints/admissions.py: the staleness bound of a revoked token,
a deleted endpoint or a moved alias); a repeated call is answered on the event loop with
no query, through one pooled HTTP client per replica. On the Kubernetes backend the call
goes to the served version's Service by its cluster DNS name (rollout.Route.url), through
one pooled httpx client per event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
import weakref
from dataclasses import dataclass, field

import aiohttp
import httpx
from asgiref.sync import sync_to_async
from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.db import close_old_connections
from django.http import HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from accounts.authentication import token_by_hash
from accounts.models import ApiToken
from endpoints import admissions, local, rollout, services, traffic
from endpoints.models import Endpoint, EndpointToken
from projects.permissions import can

VERSION_HEADER = "Gantry-Model-Version"
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=60.0)
MAX_BODY = 32 * 1024 * 1024


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.endpoint_pk: int | None = None


def _bearer(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(header) == 2 and header[0].lower() in ("bearer", "token"):
        return header[1]
    return None


def find_endpoint(tenant: str, project: str, name: str) -> Endpoint | None:
    # Ordered by the key alone: the model's ordering (by project, by name) would have the
    # ORM compile the project's own ordering too, on every call.
    return (
        Endpoint.objects.select_related(
            "project", "version", "serving_version", "canary_serving_version"
        )
        .filter(project__tenant__slug=tenant, project__slug=project, name=name)
        .order_by("pk")
        .first()
    )


def authorize_secret(secret: str, tenant: str, project: str, name: str) -> Endpoint:
    """The endpoint a bearer token may call, or Refused (404 for what the caller cannot
    see, 403 for an endpoint they see but may not call, 401 for a bad token)."""
    endpoint = find_endpoint(tenant, project, name)
    if secret.startswith(EndpointToken.PREFIX):
        token = EndpointToken.objects.filter(
            key_hash=services.hash_secret(secret), revoked_at=None
        ).first()
        if token is None:
            raise Refused(401, "Invalid or revoked endpoint token.")
        if endpoint is None or token.endpoint_id != endpoint.pk:
            raise Refused(404, "No such endpoint.")
        return endpoint
    if not secret.startswith(ApiToken.PREFIX):
        raise Refused(401, "Give an API token: Authorization: Bearer gty_… (or gep_…).")
    api_token = token_by_hash(ApiToken.hash_key(secret))
    if api_token is None or not api_token.user.is_active:
        raise Refused(401, "Invalid, expired or revoked token.")
    return _check_user(api_token.user, endpoint, api_token)


def authorize(request, tenant: str, project: str, name: str) -> Endpoint:
    """As authorize_secret, for a Django request: a bearer token, or the signed-in
    session (the endpoint page's "try it"), CSRF-checked."""
    secret = _bearer(request)
    if secret:
        return authorize_secret(secret, tenant, project, name)
    user = request.user
    if not user.is_authenticated:
        raise Refused(401, "Give an API token: Authorization: Bearer gty_… (or gep_…).")
    if request.method not in ("GET", "HEAD") and CsrfViewMiddleware(lambda r: None).process_view(
        request, None, (), {}
    ):
        raise Refused(403, "CSRF check failed: call with a token, or from Gantry's page.")
    return _check_user(user, find_endpoint(tenant, project, name), None)


def _check_user(user, endpoint: Endpoint | None, api_token) -> Endpoint:
    if endpoint is None or not can(user, "endpoint.view", endpoint, token=api_token):
        if endpoint is not None and can(user, "endpoint.view", endpoint):
            raise Refused(403, "This token does not reach that endpoint.")
        raise Refused(404, "No such endpoint.")
    if not can(user, "endpoint.predict", endpoint, token=api_token):
        raise Refused(403, "You may not call this endpoint.")
    return endpoint


def over_rate_limit(endpoint: Endpoint) -> bool:
    if not endpoint.rate_limit:
        return False
    key = f"endpoint-rate:{endpoint.pk}:{int(time.time())}"
    cache.add(key, 0, 3)
    try:
        return cache.incr(key) > endpoint.rate_limit
    except ValueError:  # expired between add and incr
        return False


# Connections to each replica, per event loop (an ASGI server's loop lives as long as the
# process): a pool of keep-alive connections. aiohttp's client, not httpx's: httpx's
# pool costs about 1 ms of CPU a call, more with many connections (it checks each one
# on every call), aiohttp's a tenth of that (measured beside bench/endpoints.py).
# Calls through Django's view (the "try it" form; under WSGI, where each request has a
# loop of its own) open a connection for the call and close it after.
_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
POOL_SIZE = 100  # connections to one replica from one process
# Below the 5 s MLServer's HTTP server (uvicorn) keeps an idle connection: Gantry lets go
# of one first, so a call never goes out on a connection the replica is closing.
KEEPALIVE_SECONDS = 4.0
_closing: set[asyncio.Task] = set()


class _ReplicaClient:
    """Connections to the replica's socket, opened by descriptor (local.open_socket)."""

    def __init__(self, replica: local.Replica, pooled: bool = True):
        self.fd = local.open_socket(replica)
        self.inode = os.fstat(self.fd).st_ino
        connector = aiohttp.UnixConnector(
            path=f"/proc/self/fd/{self.fd}",
            limit=POOL_SIZE,
            **({"keepalive_timeout": KEEPALIVE_SECONDS} if pooled else {"force_close": True}),
        )
        self.session = aiohttp.ClientSession(
            base_url="http://replica",
            connector=connector,
            timeout=TIMEOUT,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
        )

    async def exchange(self, method: str, path: str, body: bytes, content_type: str):
        """(status, body, content type) of the replica's answer."""
        headers = {"content-type": content_type} if content_type else {}
        async with self.session.request(
            method, "/" + path, data=body or None, headers=headers
        ) as response:
            content = await response.read()
            return response.status, content, response.headers.get("content-type")

    async def close(self) -> None:
        await self.session.close()

    def __del__(self):
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _client(replica: local.Replica) -> _ReplicaClient:
    loop = asyncio.get_running_loop()
    clients = _clients.setdefault(loop, {})
    known = clients.get(replica)
    if known is not None:
        try:
            current = os.stat(replica.socket_dir / local.SOCKET, follow_symlinks=False).st_ino
        except OSError:
            current = None
        if current == known.inode:
            return known
        clients.pop(replica, None)  # a new server (a restart): a new socket
        task = loop.create_task(known.close())
        _closing.add(task)
        task.add_done_callback(_closing.discard)
    made = _ReplicaClient(replica)
    clients[replica] = made
    return made


def _translate_invocations(body: bytes, model_name: str) -> bytes:
    """MLflow's scoring request as a KServe v2 request of one FP64 tensor."""
    try:
        data = json.loads(body or b"null")
    except ValueError as exc:
        raise Refused(400, f"The body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Refused(
            400,
            "MLflow's /invocations takes a JSON object (inputs, instances, dataframe_split or dataframe_records).",
        )
    if "dataframe_split" in data:
        rows = (
            (data["dataframe_split"] or {}).get("data")
            if isinstance(data["dataframe_split"], dict)
            else None
        )
    elif "dataframe_records" in data:
        records = data["dataframe_records"]
        rows = (
            [list(r.values()) for r in records]
            if isinstance(records, list) and all(isinstance(r, dict) for r in records)
            else None
        )
    else:
        rows = data.get("inputs", data.get("instances"))
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) and r for r in rows):
        raise Refused(
            400,
            'Give rows of numbers: {"inputs": [[...], ...]} (or instances, dataframe_split, dataframe_records).',
        )
    width = len(rows[0])
    if any(len(r) != width for r in rows):
        raise Refused(400, "Every row needs the same number of values.")
    flat = [v for r in rows for v in r]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in flat):
        raise Refused(400, "Every value must be a number.")
    return json.dumps(
        {
            "inputs": [
                {"name": "input-0", "shape": [len(rows), width], "datatype": "FP64", "data": flat}
            ]
        }
    ).encode()


def _untranslate(content: bytes) -> bytes:
    """The v2 answer's first output as MLflow's `{"predictions": ...}`, its values nested
    as its shape says (an MLflow model's class probabilities: a list per row)."""
    answer = json.loads(content)
    output = (answer.get("outputs") or [{}])[0]
    predictions = _nested(output.get("data", []), list(output.get("shape") or []))
    return json.dumps({"predictions": predictions}).encode()


def _nested(values: list, shape: list) -> list:
    """Row-major `values` nested as `shape` says, trailing dimensions of 1 dropped: a
    class per row, which MLServer sends as shape [n, 1], stays a flat list."""
    while len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    if len(shape) <= 1 or math.prod(shape) != len(values):
        return values
    step = math.prod(shape[1:])
    return [_nested(values[i : i + step], shape[1:]) for i in range(0, len(values), step)]


# On Kubernetes a replica is a Service, called by its cluster DNS name
# (`http://ep-<id>-v<n>.<namespace>.svc:80`, rollout.Route.url) over TCP: one httpx client
# per event loop, its pool shared by every endpoint (the Service spreads the calls over
# its pods). SERVICE_TRANSPORT stands in for the network where no cluster can be reached
# (tests: httpx.MockTransport); None is httpx's own.
SERVICE_TRANSPORT: httpx.AsyncBaseTransport | None = None
SERVICE_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
_service_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _service_client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _service_clients.get(loop)
    if client is None:
        client = _service_clients[loop] = httpx.AsyncClient(
            timeout=SERVICE_TIMEOUT,
            transport=SERVICE_TRANSPORT,
            limits=httpx.Limits(max_connections=POOL_SIZE, keepalive_expiry=KEEPALIVE_SECONDS),
        )
    return client


async def _forward_to_service(url: str, call_path: str, method: str, body: bytes,
                              content_type: str):  # fmt: skip
    headers = {"content-type": content_type} if content_type else {}
    response = await _service_client().request(
        method, f"{url}/{call_path}", content=body or None, headers=headers
    )
    return response.status_code, response.content, response.headers.get("content-type")


async def _forward(route: rollout.Route, call_path: str, method: str, body: bytes,
                   content_type: str, pooled: bool):  # fmt: skip
    if route.url:
        return await _forward_to_service(route.url, call_path, method, body, content_type)
    if pooled:
        return await _client(route.replica).exchange(method, call_path, body, content_type)
    once = _ReplicaClient(route.replica, pooled=False)
    try:
        return await once.exchange(method, call_path, body, content_type)
    finally:
        await once.close()


@dataclass
class Call:
    """One request to an endpoint, whichever door it came in by."""

    method: str
    path: str
    body: bytes
    content_type: str


@dataclass
class Answer:
    status: int
    content: bytes
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)


def _refusal(status: int, message: str, **headers) -> Answer:
    return Answer(status, json.dumps({"error": message}).encode(), headers=headers)


def admit(authorized, key: tuple | None = None) -> admissions.Admission:
    """In a worker thread: who is calling (`authorized()`, Refused if they may not) and
    what the endpoint serves, kept under `key` for the next calls (admissions)."""
    generation = admissions.generation()
    endpoint = authorized()
    primary, canary = services.wanted_versions(endpoint)
    admission = admissions.admission(endpoint, primary, canary)
    if key is not None:
        admissions.put(key, admission, generation)
    return admission


# The admissions being read now, per event loop: the calls that find the same key missing
# (32 clients when its entry expires) wait for one reading instead of making one each.
_admitting: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def _admit_once(authorized, key: tuple) -> admissions.Admission:
    pending = _admitting.setdefault(asyncio.get_running_loop(), {})
    reading = pending.get(key)
    if reading is None:
        reading = asyncio.ensure_future(_in_worker(admit, authorized, key))
        pending[key] = reading
        reading.add_done_callback(lambda _: pending.pop(key, None))
        # A refusal with no caller left to take it (they went away) is not logged as lost.
        reading.add_done_callback(lambda done: done.cancelled() or done.exception())
    # Shielded: a caller that goes away does not cancel the others' reading.
    return await asyncio.shield(reading)


async def _route(admission: admissions.Admission, call: Call) -> rollout.Route:
    """The rate limit, the path, and the replica that answers: on the event loop where
    nothing needs the database (the usual call), else in a worker thread."""
    endpoint = admission.endpoint
    try:
        if endpoint.rate_limit and await _over_rate_limit(endpoint):
            raise Refused(
                429, f"Over this endpoint's limit of {endpoint.rate_limit} requests a second."
            )
        _target(endpoint, call)  # a path the gateway does not pass on: refused before a start
        route = rollout.quick_route(endpoint, admission.primary, admission.canary)
        if route is None:
            route = await _in_worker(_route_afresh, endpoint.pk)
        return route
    except Refused as refused:
        refused.endpoint_pk = endpoint.pk
        raise


def _route_afresh(endpoint_pk: int) -> rollout.Route:
    """rollout.route over the endpoint as the database has it now (a start, a switch)."""
    endpoint = Endpoint.objects.select_related(
        "project__tenant", "model", "version", "serving_version", "canary_serving_version"
    ).filter(pk=endpoint_pk).first()
    if endpoint is None:
        raise Refused(404, "No such endpoint.")
    try:
        return rollout.route(endpoint)
    except local.ReplicaError as exc:
        raise Refused(503, f"The endpoint's model server could not start: {exc}") from None


async def _over_rate_limit(endpoint: Endpoint) -> bool:
    # The count is in Django's cache: this process's memory is asked on the event loop,
    # a shared one (Redis, a network round trip) from a worker thread.
    if isinstance(caches["default"], LocMemCache):
        return over_rate_limit(endpoint)
    return await sync_to_async(over_rate_limit, thread_sensitive=False)(endpoint)


async def _in_worker(function, *args):
    """`function(*args)` in a worker thread with the database connection Django would
    give a request: a broken or aged one closed first, this one closed after."""

    def run():
        close_old_connections()
        try:
            return function(*args)
        finally:
            close_old_connections()

    return await sync_to_async(run, thread_sensitive=False)()


async def handle(authorized, call: Call, key: tuple | None = None) -> Answer:
    """The gateway's whole answer to one call; records it. `key` (the token's hash and
    the path, from the ASGI door) lets a repeated call skip the database (admissions) and
    go out on the replica's pooled connections."""
    started = time.perf_counter()
    try:
        if key is None:
            admission = await _in_worker(admit, authorized, None)
        else:
            admission = admissions.get(key) or await _admit_once(authorized, key)
        endpoint = admission.endpoint
        route = await _route(admission, call)
    except Refused as refused:
        if refused.endpoint_pk is not None:
            traffic.record(
                refused.endpoint_pk,
                None,
                False,
                call.method,
                call.path,
                refused.status,
                started,
                False,
            )
        return _refusal(
            refused.status, str(refused), **({"Retry-After": "1"} if refused.status == 429 else {})
        )
    try:
        answer, route = await _answer(endpoint, route, call, pooled=key is not None)
    except Refused as refused:
        traffic.record(
            endpoint.pk, None, False, call.method, call.path, refused.status, started, False
        )
        return _refusal(refused.status, str(refused))
    traffic.record(
        endpoint.pk, route.version.number, route.canary, call.method, call.path,
        answer.status, started, route.cold_start_ms is not None,
    )  # fmt: skip
    return answer


def _target(endpoint: Endpoint, call: Call) -> tuple[bytes, str, str]:
    """(body, replica path, content type) for the call; Refused for what is not passed on."""
    if len(call.body) > MAX_BODY:
        raise Refused(413, f"A request body is at most {MAX_BODY // 1024 // 1024} MiB.")
    if call.path == "invocations":
        if call.method != "POST":
            raise Refused(405, "POST a JSON body to invocations.")
        body = _translate_invocations(call.body, endpoint.name)
        return body, f"v2/models/{endpoint.name}/infer", "application/json"
    if call.path == "ping":
        return b"", f"v2/models/{endpoint.name}/ready", ""
    if _inference_path(call.path, endpoint.name):
        return call.body, call.path, call.content_type
    raise Refused(
        404,
        f"The gateway passes on KServe v2's inference paths (v2, v2/health/…, "
        f"v2/models/{endpoint.name}/…), invocations and ping.",
    )


def _inference_path(path: str, name: str) -> bool:
    """The Open Inference Protocol's paths for this endpoint's model, and nothing else of
    MLServer: its model repository API (v2/repository/…: load, unload) would let anyone
    who may call the endpoint take its model down."""
    if path in ("v2", "v2/health/live", "v2/health/ready"):
        return True
    prefix = f"v2/models/{name}"
    return path == prefix or path.startswith(prefix + "/")


async def _answer(endpoint: Endpoint, route: rollout.Route, call: Call, pooled: bool):
    body, target, content_type = _target(endpoint, call)
    method = call.method
    for attempt in range(2):
        try:
            status, content, answer_type = await _forward(
                route, target, method, body, content_type, pooled
            )
            break
        except (aiohttp.ClientError, httpx.TransportError, OSError):  # a timeout is an OSError
            if attempt:
                raise Refused(503, "The endpoint's model server did not answer.") from None
            # It stopped (idle, or an old version drained) since it was chosen: once it
            # has gone, ask again (a cold start, or the version that replaced it).
            await _in_worker(rollout.after_failure, endpoint, route)
            route = await _in_worker(_route_afresh, endpoint.pk)
    if status == 422:
        status = 400
    elif status >= 500:
        status = 502
    if call.path == "invocations" and status == 200:
        content = _untranslate(content)
    headers = {VERSION_HEADER: f"v{route.version.number}"}
    if route.canary:
        headers["Gantry-Canary"] = "true"
    if route.cold_start_ms is not None:
        headers["Gantry-Cold-Start-Ms"] = f"{route.cold_start_ms:.0f}"
    return Answer(status, content, answer_type or "application/json", headers), route


@csrf_exempt
async def serve(request, tenant: str, project: str, endpoint: str, path: str = ""):
    """The gateway as a Django view: under WSGI, and for the "try it" form's session
    (ASGI servers send token calls to endpoints.asgi first, past Django's middleware)."""
    call = Call(request.method, path, request.body, request.content_type or "")
    answer = await handle(lambda: authorize(request, tenant, project, endpoint), call)
    response = HttpResponse(answer.content, status=answer.status, content_type=answer.content_type)
    for name, value in answer.headers.items():
        response[name] = value
    return response


serve.permission_action = "endpoint.predict"
