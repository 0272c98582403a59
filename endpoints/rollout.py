"""Which replica answers a request, and rolling an endpoint to a new version without a
failed request.

Each endpoint has two slots, the primary and the canary. A slot's `serving` version is
the one that answers (Endpoint.serving_version / canary_serving_version); its `wanted`
version is the one its alias points at now (services.wanted_versions). When they differ
the request is still answered by the serving version while a background thread rolls
the slot: it starts the new version's replicas, waits until they answer ready, switches
the slot in the database (every web process reads it within admissions.TTL), waits
DRAIN_SECONDS for the requests the old replicas hold, and stops them.

A slot whose replicas are not running (never started, or scaled to zero after the
endpoint's idle time) starts them in the request that finds them down, and that
request waits for them: the cold start, whose time is kept on the endpoint. A start (or
a roll's new replicas) that would take the tenant past its quota, with what its jobs and
other endpoints hold by then, is refused with the quota's message instead.

On the Kubernetes backend (`endpoint.backend == "kubernetes"`, endpoints.k8s) the same
steps act on Deployments: a start applies the version's Deployment with the endpoint's
replicas (from zero, or not there yet) and waits for a ready pod; a roll applies the new
version's, waits until all its replicas are ready, switches, drains and deletes the old
version's objects; the request goes to the version's Service by its cluster DNS name.
"""

from __future__ import annotations

import fcntl
import logging
import random
import threading
import time
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import close_old_connections

from endpoints import admissions, k8s, local, services
from endpoints.models import Endpoint, EndpointState
from modelhub.models import ModelVersion

logger = logging.getLogger(__name__)

# How long old replicas keep running after the switch, for the requests they hold.
DRAIN_SECONDS = 2.0

# A version whose replicas failed to start is not started again in this process for this
# long: the calls meanwhile get the reason at once, instead of each starting a server that
# fails the same way (and a roll is not retried on every call).
RETRY_AFTER_FAILURE = 30.0
_failures: dict[tuple[int, int], tuple[float, str]] = {}

SEEN_RUNNING_SECONDS = 1.0
_running_until: dict[local.Replica, float] = {}

_rolling: set[tuple[int, str]] = set()
_rolling_lock = threading.Lock()


@dataclass
class Route:
    """Where one request goes: a local replica, or (Kubernetes) a Service's URL."""

    version: ModelVersion
    replica: local.Replica | None
    canary: bool
    cold_start_ms: float | None = None
    url: str = ""


def _on_k8s(endpoint: Endpoint) -> bool:
    return endpoint.backend == "kubernetes"


def _to(endpoint: Endpoint, version: ModelVersion, canary: bool, cold=None) -> Route:
    """The route to `version`: one of its running local replicas, or its Service."""
    if _on_k8s(endpoint):
        return Route(version, None, canary, cold, k8s.service_url(endpoint, version.number))
    replicas = local.replicas_of(endpoint, version.pk)
    ready = [r for r in replicas if local.running(r)] or replicas
    return Route(version, random.choice(ready), canary, cold)


def route(endpoint: Endpoint) -> Route:
    """The replica that answers this request, starting or rolling what needs it.
    Raises local.ReplicaError when no replica can be had."""
    primary, canary = services.wanted_versions(endpoint)
    if primary is None:
        what = f"the alias “{endpoint.alias}”" if endpoint.alias else "its version (deleted)"
        raise local.ReplicaError(f"{what} of {endpoint.model} is no version to serve")
    use_canary, wanted, serving, field = _slot(endpoint, primary, canary)
    cold = None
    if serving is not None and serving.pk != wanted.pk and _up(endpoint, serving):
        _roll_later(endpoint.pk, "canary" if use_canary else "primary", field, serving.pk,
                    wanted.pk)  # fmt: skip
        version = serving
    else:
        version = wanted
        if not _up(endpoint, wanted):
            cold = _cold_start(endpoint, wanted)
        if serving is None or serving.pk != wanted.pk:
            Endpoint.objects.filter(pk=endpoint.pk).update(**{field: wanted})
            admissions.forget(endpoint.pk)
    return _to(endpoint, version, use_canary, cold)


def quick_route(endpoint: Endpoint, primary, canary) -> Route | None:
    """`route` without the database, from versions already read (admissions): the
    serving version's running replica (a roll started in the background if the alias
    moved). None where `route` must decide: nothing serves or runs yet (a start)."""
    if primary is None:
        return None
    use_canary, wanted, serving, field = _slot(endpoint, primary, canary)
    if serving is None:
        return None
    if _on_k8s(endpoint):
        url = k8s.seen_url(endpoint.pk, serving.number)  # on the event loop: no query
        if url is None:
            return None
        route = Route(serving, None, use_canary, url=url)
    else:
        running = [r for r in local.replicas_of(endpoint, serving.pk) if _seen_running(r)]
        if not running:
            return None
        route = Route(serving, random.choice(running), use_canary)
    if serving.pk != wanted.pk:
        _roll_later(endpoint.pk, "canary" if use_canary else "primary", field, serving.pk,
                    wanted.pk)  # fmt: skip
    return route


def _seen_running(replica: local.Replica) -> bool:
    """local.running, trusted for SEEN_RUNNING_SECONDS once seen: a replica that stopped
    meanwhile refuses the call's connection, and the gateway routes that call afresh."""
    now = time.monotonic()
    if _running_until.get(replica, 0.0) > now:
        return True
    if local.running(replica):
        _running_until[replica] = now + SEEN_RUNNING_SECONDS
        return True
    _running_until.pop(replica, None)
    return False


def _slot(endpoint: Endpoint, primary: ModelVersion, canary: ModelVersion | None):
    """(canary?, wanted version, serving version, serving field) for one request: the
    canary's share of requests draws the canary slot."""
    use_canary = canary is not None and random.random() * 100 < endpoint.canary_percent
    field = "canary_serving_version" if use_canary else "serving_version"
    return use_canary, canary if use_canary else primary, getattr(endpoint, field), field


def after_failure(endpoint: Endpoint, route: Route, wait: float = 10.0) -> None:
    """A replica that did not answer: wait (at most `wait` s) until its process is gone
    unless it answers ready again; what this process knew of the endpoint is forgotten
    (a roll may have moved it). On Kubernetes, what this process saw of the version."""
    replica = route.replica
    if replica is None:
        k8s.forget(endpoint.pk, route.version.number)
        admissions.forget(endpoint.pk)
        return
    _running_until.pop(replica, None)
    deadline = time.monotonic() + wait
    while local.running(replica) and not local.ready(replica, endpoint.name):
        if time.monotonic() > deadline:
            local.stop(replica)
            break
        time.sleep(0.05)
    admissions.forget(endpoint.pk)


def _up(endpoint: Endpoint, version: ModelVersion) -> bool:
    if _on_k8s(endpoint):
        try:
            return k8s.up(endpoint, version)
        except k8s.ClusterProblem as exc:  # the reason on the page too, not only the 503
            Endpoint.objects.filter(pk=endpoint.pk).update(
                state_reason=f"v{version.number}: {exc}"[:500]
            )
            raise
    return any(local.running(r) for r in local.replicas_of(endpoint, version.pk))


def _cold_start(endpoint: Endpoint, version: ModelVersion, wait_for: int = 1) -> float:
    """Start the version's replicas and wait until one answers (`wait_for` of them on
    Kubernetes); the milliseconds it took."""
    failed = _failures.get((endpoint.pk, version.pk))
    if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_FAILURE:
        wait = RETRY_AFTER_FAILURE - (time.monotonic() - failed[0])
        raise local.ReplicaError(f"{failed[1]} (tried again in {wait:.0f} s)")
    try:  # what a start holds counts in the quota as on creation (a job may hold it now)
        services.check_quota(endpoint, services.held_by(endpoint), [])
    except ValidationError as exc:
        reason = f"v{version.number} not started: {' '.join(exc.messages)}"
        Endpoint.objects.filter(pk=endpoint.pk).update(state_reason=reason[:500])
        raise local.ReplicaError(reason) from None
    started = time.perf_counter()
    Endpoint.objects.filter(pk=endpoint.pk).update(
        state=EndpointState.STARTING, state_reason=f"starting v{version.number}"
    )
    try:
        if _on_k8s(endpoint):
            k8s.start(endpoint, version, wait_for)
        else:
            replicas = local.replicas_of(endpoint, version.pk)
            for replica in replicas:
                local.start(endpoint, version, replica)
            local.wait_ready(replicas[0], endpoint.name)
    except (local.ReplicaError, ValueError, OSError) as exc:
        _failures[(endpoint.pk, version.pk)] = (time.monotonic(), str(exc))
        Endpoint.objects.filter(pk=endpoint.pk).update(
            state=EndpointState.FAILED, state_reason=f"v{version.number}: {exc}"[:500]
        )
        raise local.ReplicaError(str(exc)) from exc
    _failures.pop((endpoint.pk, version.pk), None)
    took = (time.perf_counter() - started) * 1000
    Endpoint.objects.filter(pk=endpoint.pk).update(
        state=EndpointState.READY,
        state_reason=f"v{version.number} started in {took / 1000:.1f} s",
        last_cold_start_ms=took,
    )
    return took


def _roll_later(endpoint_pk: int, slot: str, field: str, old_pk: int, new_pk: int) -> None:
    with _rolling_lock:
        if (endpoint_pk, slot) in _rolling:
            return
        _rolling.add((endpoint_pk, slot))
    thread = threading.Thread(
        target=_roll,
        args=(endpoint_pk, slot, field, old_pk, new_pk),
        name=f"endpoint-roll-{endpoint_pk}-{slot}",
        daemon=True,
    )
    thread.start()


def _roll(endpoint_pk: int, slot: str, field: str, old_pk: int, new_pk: int) -> None:
    """Start new, wait for ready, switch, drain and stop old: one process at a time per
    endpoint slot (a lock file), whichever web process saw the move first."""
    lock_path = local.root_dir() / f"roll-{endpoint_pk}-{slot}.lock"
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process rolls this slot
            endpoint = Endpoint.objects.filter(pk=endpoint_pk).first()
            new = ModelVersion.objects.filter(pk=new_pk).first()
            if endpoint is None or new is None or getattr(endpoint, f"{field}_id") != old_pk:
                return
            roll_to(endpoint, field, old_pk, new)
    finally:
        with _rolling_lock:
            _rolling.discard((endpoint_pk, slot))
        close_old_connections()


def roll_to(endpoint: Endpoint, field: str, old_pk: int, new: ModelVersion) -> None:
    """Start `new` (on Kubernetes: all its replicas ready), switch the slot from `old_pk`,
    drain, and stop the old version's replicas (delete its objects) unless the other slot
    serves it."""
    try:
        _cold_start(endpoint, new, wait_for=endpoint.replicas)
    except local.ReplicaError:
        return  # the old version goes on answering; the endpoint's state says why
    switched = Endpoint.objects.filter(pk=endpoint.pk, **{f"{field}_id": old_pk}).update(
        **{field: new}
    )
    if not switched:
        return
    admissions.forget(endpoint.pk)
    time.sleep(DRAIN_SECONDS)
    endpoint.refresh_from_db()
    if old_pk in (endpoint.serving_version_id, endpoint.canary_serving_version_id):
        return
    if _on_k8s(endpoint):
        old = ModelVersion.objects.filter(pk=old_pk).values_list("number", flat=True).first()
        if old is not None:
            try:
                k8s.remove_version(endpoint.pk, endpoint.project.tenant.slug, old)
            except Exception as exc:
                Endpoint.objects.filter(pk=endpoint.pk).update(
                    state_reason=f"v{old}'s objects not deleted: {exc}"[:500]
                )
        return
    for replica in local.replicas_of(endpoint, old_pk):
        local.stop(replica)


def stop_replicas(endpoint_pk: int, backend: str = "local", tenant_slug: str = "") -> int:
    """Stop a (deleted) endpoint's replicas; on Kubernetes, delete its objects in its
    tenant's namespace. A cluster that does not answer is logged: the endpoint is gone."""
    stopped = local.stop_all(endpoint_pk)
    if backend == "kubernetes":
        try:
            stopped += k8s.delete_objects(endpoint_pk, tenant_slug)
        except Exception as exc:
            logger.warning(
                "endpoint %s's objects in the cluster not deleted: %s",
                endpoint_pk,
                k8s.describe_error(exc, "default"),
            )
    return stopped


def live_state(endpoint: Endpoint) -> str:
    """The state to show (`live_status`'s)."""
    return live_status(endpoint)[0]


def live_status(endpoint: Endpoint) -> tuple[str, str]:
    """(state, replicas in words) to show: a ready endpoint whose replicas all stopped
    (idle) is scaled to zero, whatever the row last said. On Kubernetes both come from
    its Deployments' status ("2/2 replicas ready", "scaled to zero", "starting: 0/2
    ready"); the words are empty on the local backend."""
    if _on_k8s(endpoint):
        if endpoint.state == EndpointState.FAILED:
            return endpoint.state, ""
        state, words = k8s.live(endpoint)
        return state or endpoint.state, words
    if endpoint.state == EndpointState.READY:
        versions = {endpoint.serving_version_id, endpoint.canary_serving_version_id} - {None}
        if not any(local.running(r) for v in versions for r in local.replicas_of(endpoint, v)):
            return EndpointState.SCALED_TO_ZERO, ""
    return endpoint.state, ""
