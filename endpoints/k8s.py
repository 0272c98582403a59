"""An endpoint on the Kubernetes backend: its objects applied to the cluster, scaled to
zero and back, rolled from one version to the next, and deleted.

endpoints.kubernetes builds the manifests; this module sends them, through the jobs'
Kubernetes backend (its cluster, its connection, `ensure_tenant` for the tenant's
namespace, quota and policies first, `describe_error` for what went wrong). Every write is
a server-side apply (field manager `gantry`), so applying again changes nothing.

The pods fetch the model with a read-only API token of the endpoint's creator, limited to
the endpoint's project (accounts.services.create_api_token, the token a user would make),
kept in the Secret `ep-<id>-token`. Gantry never reads a Secret back, so a new token is
made whenever a version's Deployment is created (a first start, a roll, or a namespace
deleted behind Gantry's back), and the older ones are revoked (in the audit log) and
removed, so the creator's token list holds one per endpoint, not one per roll. A failure rolls the token's
row back with the rest of the transaction.

Scale to zero: a Deployment carries when it was last scaled up (`SCALED_UP_AT`); the
minute's pass (`scale_idle`, from endpoints.tasks) sets `replicas: 0` on an endpoint that
has had no request for its `idle_seconds` since then or since its last recorded request
(endpoints.traffic). The next request finds no ready pod and applies the Deployment with
the endpoint's replicas again (endpoints.rollout's cold start).

What runs counts like a job (endpoints.usage): each Deployment Gantry scales up opens a
replica interval with its replica count, which the tenant's quota holdings
(endpoints.services.running_replica_counts), the cluster page and usage reports read;
scaling it to zero or deleting it closes the interval, and the minute's pass squares the
open intervals with the Deployments the cluster has.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from accounts.models import ApiToken, TokenScope
from accounts.services import create_api_token, revoke_api_token
from endpoints import kubernetes as ek
from endpoints import usage
from endpoints.local import ReplicaError, runtime_missing, served_file
from endpoints.models import Endpoint, EndpointState
from jobs.compute import get_backend
from jobs.compute.kubernetes import manifests as m
from jobs.compute.kubernetes.backend import manifest_config
from jobs.compute.kubernetes.client import describe_error

logger = logging.getLogger(__name__)

FIELD_MANAGER = "gantry"
APPLY = "application/apply-patch+yaml"
SCALED_UP_AT = "gantry.dev/scaled-up-at"
READY_TIMEOUT = 120.0
POLL_SECONDS = 0.25
TOKEN_NAME = "endpoint {} on Kubernetes (model download)"
# A version seen with a ready pod is routed to without asking the cluster for this long
# (the gateway's quick path, on the event loop: no query, no API call); a call that then
# finds it gone is routed afresh. (endpoint id, version number) -> (until, Service URL).
SEEN_READY_SECONDS = 5.0
_seen_ready: dict[tuple[int, int], tuple[float, str]] = {}


class ClusterProblem(ReplicaError):
    """The cluster refused or did not answer; the message says why, in words."""


def _backend():
    return get_backend("kubernetes")


def _cluster():
    """(connection, cluster ref) of the default cluster: where endpoints run."""
    backend = _backend()
    ref = backend.default_cluster()
    return backend.connection(ref), ref


def _apps(conn):
    from kubernetes import client

    return client.AppsV1Api(conn.api)


def namespace_of(tenant_slug: str) -> str:
    return m.namespace_name(tenant_slug, _backend().default_cluster().namespace_prefix)


def service_url(endpoint: Endpoint, version_number: int) -> str:
    return ek.service_url(endpoint.pk, version_number, namespace_of(endpoint.project.tenant.slug))


def spec_of(endpoint: Endpoint, version, replicas: int) -> ek.EndpointSpec:
    """The version's Deployment as asked: its file and runtime (endpoints.local.served_file)
    and the image with that runtime (GANTRY_K8S_TORCH_IMAGE where the model needs
    PyTorch). A ValueError says why the version cannot be served."""
    served = served_file(version)
    missing = runtime_missing(served, "kubernetes")
    if missing:
        raise ValueError(missing)
    return ek.EndpointSpec(
        id=endpoint.pk,
        tenant_slug=endpoint.project.tenant.slug,
        name=endpoint.name,
        version_id=version.pk,
        version_number=version.number,
        model_file=served.path,
        runtime=served.runtime,
        replicas=replicas,
        cpus=endpoint.cpus,
        memory_mb=endpoint.memory_mb,
        gpus=endpoint.gpus,
        image=(
            settings.GANTRY_K8S_TORCH_IMAGE
            if served.needs_torch
            else settings.GANTRY_K8S_ENDPOINT_IMAGE
        ),
    )


# --- writing -----------------------------------------------------------------------------


def _apply(conn, manifest: dict) -> None:
    meta = manifest["metadata"]
    patch = {
        "Secret": conn.core.patch_namespaced_secret,
        "Service": conn.core.patch_namespaced_service,
        "NetworkPolicy": conn.networking.patch_namespaced_network_policy,
        "Deployment": _apps(conn).patch_namespaced_deployment,
    }[manifest["kind"]]
    patch(
        meta["name"],
        meta["namespace"],
        manifest,
        field_manager=FIELD_MANAGER,
        force=True,
        _content_type=APPLY,
        _request_timeout=conn.timeout,
        _preload_content=False,
    )


def _tokens(endpoint: Endpoint):
    return ApiToken.objects.active().filter(
        project=endpoint.project, name=TOKEN_NAME.format(endpoint.pk)
    )


def _write_token(conn, cfg, spec: ek.EndpointSpec, endpoint: Endpoint) -> None:
    """A new read-only token of the creator's, limited to the project, in the Secret; the
    older ones revoked and removed (inside the caller's transaction: a failure keeps no new
    row and removes none)."""
    creator = endpoint.created_by
    if creator is None or not creator.is_active:
        raise ClusterProblem(
            "the endpoint's creator is gone, and its pods fetch the model with a read-only "
            "token of theirs: create the endpoint again"
        )
    older = list(ApiToken.objects.filter(name=TOKEN_NAME.format(endpoint.pk)))
    try:
        _, secret = create_api_token(
            actor=creator,
            name=TOKEN_NAME.format(endpoint.pk),
            scope=TokenScope.READ,
            project=endpoint.project,
        )
    except (PermissionDenied, ValidationError) as exc:
        raise ClusterProblem(
            f"no read-only token for the model's download: {creator} may not read "
            f"{endpoint.project} any more ({exc})"
        ) from None
    _apply(conn, ek.token_secret(spec, cfg, secret))
    _retire(older)


def _retire(tokens) -> None:
    """Revoke Gantry's download tokens (the audit log keeps each revocation) and remove
    them from their user's token list."""
    for token in tokens:
        revoke_api_token(actor=token.user, token=token)
        token.delete()


def apply_version(endpoint: Endpoint, version, replicas: int) -> str:
    """The version's Deployment (with `replicas`), Service and NetworkPolicy applied in
    the tenant's namespace (set up first), and the token Secret where needed; the
    Deployment's name. ClusterProblem, in words, when the cluster says no."""
    backend = _backend()
    ref = backend.default_cluster()
    try:
        conn = backend.connection(ref)
        namespace = backend.ensure_tenant(conn, endpoint.project.tenant)
        cfg = manifest_config(ref)
        spec = spec_of(endpoint, version, replicas)
        deployment = ek.deployment(spec, cfg)
        name = deployment["metadata"]["name"]
        with transaction.atomic():
            # One apply of an endpoint at a time (its row locked, on PostgreSQL): two web
            # processes starting it together make one token, not two.
            locked = Endpoint.objects.select_for_update().filter(pk=endpoint.pk)
            if not locked.values_list("pk", flat=True):
                raise ClusterProblem("the endpoint was deleted")
            current = read(conn, namespace, name)
            # When it was scaled up, kept while it runs: a changed annotation is a new
            # generation of a Deployment, and applying what runs must change nothing.
            scaled_up = _scaled_up_at(current) if current and current.spec.replicas else None
            if replicas:
                at = (scaled_up or timezone.now()).isoformat()
                deployment["metadata"]["annotations"] = {SCALED_UP_AT: at}
            if current is None or not _tokens(endpoint).exists():
                _write_token(conn, cfg, spec, endpoint)
            for manifest in (deployment, ek.service(spec, cfg), ek.network_policy(spec, cfg)):
                _apply(conn, manifest)
            usage.deployment_scaled(endpoint.pk, name, version.number, replicas, timezone.now())
    except ClusterProblem:
        raise
    except ValueError as exc:  # the version is no servable model
        raise ClusterProblem(str(exc)) from None
    except Exception as exc:
        raise ClusterProblem(describe_error(exc, ref.name)) from exc
    _seen_ready.pop((endpoint.pk, version.number), None)
    return name


def scale_to_zero(conn, namespace: str, name: str) -> None:
    _apps(conn).patch_namespaced_deployment(
        name,
        namespace,
        {"spec": {"replicas": 0}},
        field_manager=FIELD_MANAGER,
        _content_type="application/merge-patch+json",
        _request_timeout=conn.timeout,
        _preload_content=False,
    )


def _delete(call, name: str, namespace: str, conn) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        call(name, namespace, propagation_policy="Background", _request_timeout=conn.timeout)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def remove_version(endpoint_pk: int, tenant_slug: str, version_number: int) -> None:
    """Delete one version's Deployment, Service and NetworkPolicy (missing ones are fine)."""
    conn, ref = _cluster()
    namespace = m.namespace_name(tenant_slug, ref.namespace_prefix)
    name = ek.version_object_name(endpoint_pk, version_number)
    for call in (
        _apps(conn).delete_namespaced_deployment,
        conn.core.delete_namespaced_service,
        conn.networking.delete_namespaced_network_policy,
    ):
        _delete(call, name, namespace, conn)
    usage.deployments_gone([name], timezone.now())
    _seen_ready.pop((endpoint_pk, version_number), None)


def delete_objects(endpoint_pk: int, tenant_slug: str) -> int:
    """Delete everything of an endpoint in the cluster (every version's objects and the
    token Secret) and revoke its download tokens; how many objects were deleted. Its
    replica intervals end first, whether or not the cluster answers: the endpoint is gone."""
    prefix = ek.version_object_name(endpoint_pk, 0)[:-1]  # ep-<id>-v
    gone = usage.open_deployments().filter(replica__startswith=prefix)
    usage.deployments_gone(list(gone.values_list("replica", flat=True)), timezone.now())
    conn, ref = _cluster()
    namespace = m.namespace_name(tenant_slug, ref.namespace_prefix)
    selector = f"{ek.LABEL_ENDPOINT}={endpoint_pk},{m.LABEL_KIND}=endpoint"
    apps = _apps(conn)
    kinds = (
        (apps.list_namespaced_deployment, apps.delete_namespaced_deployment),
        (conn.core.list_namespaced_service, conn.core.delete_namespaced_service),
        (
            conn.networking.list_namespaced_network_policy,
            conn.networking.delete_namespaced_network_policy,
        ),
    )
    deleted = 0
    for listing, delete in kinds:
        found = listing(namespace, label_selector=selector, _request_timeout=conn.timeout)
        for item in found.items:
            deleted += _delete(delete, item.metadata.name, namespace, conn)
    secret = ek.endpoint_token_secret_name(endpoint_pk)
    deleted += _delete(conn.core.delete_namespaced_secret, secret, namespace, conn)
    _retire(ApiToken.objects.filter(name=TOKEN_NAME.format(endpoint_pk)))
    for key in [k for k in _seen_ready if k[0] == endpoint_pk]:
        _seen_ready.pop(key, None)
    return deleted


# --- reading -----------------------------------------------------------------------------


def read(conn, namespace: str, name: str):
    """The Deployment, or None where there is none."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _apps(conn).read_namespaced_deployment(
            name, namespace, _request_timeout=conn.timeout
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def replicas(endpoint: Endpoint, version_number: int) -> tuple[int, int] | None:
    """(replicas asked for, replicas ready) of the version's Deployment; None if there is
    none. ClusterProblem when the cluster does not answer."""
    name = ek.version_object_name(endpoint.pk, version_number)
    ref = None
    try:
        conn, ref = _cluster()
        found = read(conn, namespace_of(endpoint.project.tenant.slug), name)
    except Exception as exc:
        raise ClusterProblem(describe_error(exc, ref.name if ref else "default")) from exc
    if found is None:
        return None
    return found.spec.replicas or 0, (found.status.ready_replicas or 0) if found.status else 0


def up(endpoint: Endpoint, version) -> bool:
    """Whether a pod of the version is ready (asked of the cluster; remembered for
    SEEN_READY_SECONDS for `seen_url`). A running Deployment whose replicas are not the
    endpoint's (changed since it started) is applied again with the endpoint's."""
    state = replicas(endpoint, version.number)
    ready = state is not None and state[0] > 0 and state[1] > 0
    if ready and state[0] != endpoint.replicas:
        apply_version(endpoint, version, endpoint.replicas)
    if ready:
        _seen(endpoint, version.number)
    else:
        _seen_ready.pop((endpoint.pk, version.number), None)
    return ready


def _seen(endpoint: Endpoint, version_number: int) -> None:
    url = service_url(endpoint, version_number)
    _seen_ready[(endpoint.pk, version_number)] = (time.monotonic() + SEEN_READY_SECONDS, url)


def seen_url(endpoint_pk: int, version_number: int) -> str | None:
    """The version's Service URL if this process saw a ready pod of it within
    SEEN_READY_SECONDS (`up`), else None; asks neither the database nor the cluster."""
    until, url = _seen_ready.get((endpoint_pk, version_number), (0.0, ""))
    return url if until > time.monotonic() else None


def forget(endpoint_pk: int, version_number: int) -> None:
    _seen_ready.pop((endpoint_pk, version_number), None)


def start(endpoint: Endpoint, version, wait_for: int = 1) -> None:
    """Apply the version with the endpoint's replicas and wait until `wait_for` of its
    pods are ready (ClusterProblem after READY_TIMEOUT seconds)."""
    apply_version(endpoint, version, endpoint.replicas)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        state = replicas(endpoint, version.number)
        if state is not None and state[1] >= min(wait_for, endpoint.replicas):
            _seen(endpoint, version.number)
            return
        if time.monotonic() > deadline:
            ready = state[1] if state else 0
            raise ClusterProblem(
                f"v{version.number}'s pods were not ready in {READY_TIMEOUT:.0f} s "
                f"({ready}/{endpoint.replicas} ready)"
            )
        time.sleep(POLL_SECONDS)


def live(endpoint: Endpoint) -> tuple[str | None, str]:
    """(state, words) of the served versions' Deployments, for the endpoint page: ready
    when a pod of one is ready, starting when they have pods but none ready, scaled to
    zero otherwise; in words "2/2 replicas ready", "scaled to zero", "starting: 0/2
    ready" (each version named when there are two). (None, why) when the cluster could
    not be asked."""
    numbers = []
    for version in (endpoint.serving_version, endpoint.canary_serving_version):
        if version is not None and version.number not in numbers:
            numbers.append(version.number)
    if not numbers:
        return EndpointState.SCALED_TO_ZERO, "not started"
    parts, states = [], set()
    for number in numbers:
        try:
            state = replicas(endpoint, number)
        except ClusterProblem as exc:
            return None, str(exc)
        if state is None or state[0] == 0:
            text = "scaled to zero" if state else "no Deployment"
            states.add(EndpointState.SCALED_TO_ZERO)
        elif state[1] == 0:
            text = f"starting: 0/{state[0]} ready"
            states.add(EndpointState.STARTING)
        else:
            text = f"{state[1]}/{state[0]} replicas ready"
            states.add(EndpointState.READY)
        parts.append(f"v{number}: {text}" if len(numbers) > 1 else text)
    order = (EndpointState.READY, EndpointState.STARTING, EndpointState.SCALED_TO_ZERO)
    return next(s for s in order if s in states), "; ".join(parts)


# --- scale to zero -----------------------------------------------------------------------


def _scaled_up_at(deployment) -> datetime | None:
    text = (deployment.metadata.annotations or {}).get(SCALED_UP_AT)
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _square(endpoint_pk: int, deployments: list) -> None:
    """The endpoint's open replica intervals made to say what its Deployments ask for
    now: one scaled or deleted behind Gantry's back is closed or reopened with its count,
    and one that runs uncounted (applied before intervals were kept) is opened."""
    asked = {
        d.metadata.name: (d.spec.replicas or 0, int(d.metadata.labels.get(ek.LABEL_VERSION, 0)))
        for d in deployments
    }
    counted = {
        i.replica: (i.replicas, i.version_number)
        for i in usage.open_deployments().filter(endpoint_id=endpoint_pk)
    }
    for name in asked.keys() | counted.keys():
        n, version = asked.get(name, (0, counted.get(name, (0, None))[1]))
        if n != counted.get(name, (0,))[0]:
            usage.deployment_scaled(endpoint_pk, name, version, n, timezone.now())


def scale_idle(now: datetime | None = None) -> dict:
    """The minute's pass over Kubernetes endpoints: each one's replica intervals squared
    with its Deployments (`_square`), and every endpoint with no request for its idle time
    (since its last request, or since it was last scaled up) set to `replicas: 0`."""
    now = now or timezone.now()
    counted = usage.open_deployments().values_list("endpoint_id", flat=True)
    endpoints = (
        Endpoint.objects.filter(backend="kubernetes")
        .filter(Q(idle_seconds__gt=0) | Q(pk__in=counted))
        .select_related("project__tenant")
        .annotate(last_request=Max("requests__at"))
    )
    scaled, failed = 0, 0
    conn = ref = None
    for endpoint in endpoints:
        try:
            if conn is None:
                conn, ref = _cluster()
            namespace = namespace_of(endpoint.project.tenant.slug)
            selector = f"{ek.LABEL_ENDPOINT}={endpoint.pk},{m.LABEL_KIND}=endpoint"
            deployments = (
                _apps(conn)
                .list_namespaced_deployment(
                    namespace, label_selector=selector, _request_timeout=conn.timeout
                )
                .items
            )
            _square(endpoint.pk, deployments)
            running = [d for d in deployments if d.spec.replicas]
            if endpoint.idle_seconds <= 0 or not running:
                continue
            since = [t for t in [endpoint.last_request, *map(_scaled_up_at, running)] if t]
            idle = (now - max(since)).total_seconds() if since else None
            if idle is not None and idle < endpoint.idle_seconds:
                continue
            for deployment in running:
                scale_to_zero(conn, namespace, deployment.metadata.name)
                version = int(deployment.metadata.labels.get(ek.LABEL_VERSION, 0))
                forget(endpoint.pk, version)
            usage.deployments_gone([d.metadata.name for d in running], timezone.now())
        except Exception as exc:
            failed += 1
            logger.warning(
                "could not scale endpoint %s to zero: %s",
                endpoint.pk,
                describe_error(exc, ref.name if ref else "default"),
            )
            continue
        scaled += 1
        Endpoint.objects.filter(pk=endpoint.pk).update(
            state=EndpointState.SCALED_TO_ZERO,
            state_reason=f"scaled to zero after {endpoint.idle_seconds} s without a request",
        )
    return {"scaled_to_zero": scaled, "failed": failed}
