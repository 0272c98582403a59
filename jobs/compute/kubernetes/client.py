"""The Kubernetes API side of the backend: which clusters there are and how to reach them
(`ClusterRef`, `Connection`), plain words for what went wrong (`describe_error`), node
resources, and the one-object calls a launch makes (create, delete again, wait for a
quota to be counted). Nothing here touches the database or a job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass

import yaml
from django.conf import settings

from core import registry
from jobs.compute.kubernetes import manifests as m

logger = logging.getLogger("jobs.compute.kubernetes.backend")


class ClusterError(Exception):
    """A cluster could not be used; the message is for people (it becomes a job's reason)."""


# --- clusters and clients ----------------------------------------------------------------


@dataclass
class ClusterRef:
    """What is needed to reach one cluster (a KubernetesCluster row, or the environment)."""

    name: str
    in_cluster: bool = False
    kubeconfig: str = ""
    context: str = ""
    namespace_prefix: str = "gantry-"

    @classmethod
    def from_model(cls, row) -> ClusterRef:
        return cls(row.name, row.in_cluster, row.kubeconfig, row.context, row.namespace_prefix)


def registered_clusters() -> list[ClusterRef]:
    """Every registered cluster, the default first; the environment's when none is.
    Clusters are registered in the cluster app, above jobs: asked through the registry."""
    rows = [ClusterRef.from_model(c) for c in registry.kubernetes_clusters()]
    if rows:
        return rows
    return [ClusterRef("default", in_cluster=bool(os.environ.get("KUBERNETES_SERVICE_HOST")))]


def describe_error(exc: Exception, cluster: str) -> str:
    """Plain words for what went wrong talking to a cluster."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    if isinstance(exc, ClusterError):
        return str(exc)
    if isinstance(exc, ConfigException):
        return f"the kubeconfig of cluster {cluster} does not work: {exc}"
    if isinstance(exc, ApiException):
        message = exc.reason or ""
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(exc.body or "{}").get("message") or message
        if exc.status in (401, 403):
            return f"cluster {cluster} refused Gantry's credentials (HTTP {exc.status}: {message})"
        return f"the Kubernetes API of cluster {cluster} answered HTTP {exc.status}: {message}"
    reason = getattr(exc, "reason", None) or exc
    return f"the Kubernetes cluster {cluster} does not answer ({reason})"


class Connection:
    """The API clients for one cluster."""

    def __init__(self, ref: ClusterRef):
        from kubernetes import client, config

        self.ref = ref
        cfg = client.Configuration()
        try:
            if ref.in_cluster:
                config.load_incluster_config(client_configuration=cfg)
            elif ref.kubeconfig.strip():
                config.load_kube_config_from_dict(
                    yaml.safe_load(ref.kubeconfig),
                    context=ref.context or None,
                    client_configuration=cfg,
                    persist_config=False,
                )
            else:
                config.load_kube_config(
                    context=ref.context or None, client_configuration=cfg, persist_config=False
                )
        except Exception as exc:
            raise ClusterError(describe_error(config.ConfigException(str(exc)), ref.name)) from exc
        # One quick try: the caller reports a cluster that does not answer, it does not hang.
        cfg.retries = 1
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)

    @property
    def timeout(self) -> float:
        return settings.GANTRY_K8S_API_TIMEOUT_SECONDS


def check_cluster(row) -> tuple[bool, str]:
    """The admin's "check the connection": (ok, what was found)."""
    ref = ClusterRef.from_model(row)
    try:
        conn = Connection(ref)
        nodes = conn.core.list_node(_request_timeout=conn.timeout).items
    except Exception as exc:
        return False, describe_error(exc, ref.name)
    gpus = sum(node_resources(n)["allocatable"]["gpus"] for n in nodes)
    return True, f"answers: {len(nodes)} node(s), {gpus} allocatable GPU(s)"


# --- nodes -------------------------------------------------------------------------------


def quantity(value, default=0):
    from kubernetes.utils import parse_quantity

    if value in (None, ""):
        return default
    try:
        return parse_quantity(value)
    except ValueError:
        return default


def node_resources(node) -> dict:
    """Capacity and allocatable CPUs, memory (MiB) and GPUs of a V1Node, and its state."""

    def amounts(source) -> dict:
        source = source or {}
        return {
            "cpus": float(quantity(source.get("cpu"))),
            "memory_mb": int(quantity(source.get("memory")) // (1024 * 1024)),
            "gpus": int(quantity(source.get(m.GPU_RESOURCE))),
        }

    status = node.status
    labels = node.metadata.labels or {}
    ready = any(
        c.type == "Ready" and c.status == "True" for c in (status.conditions or []) if status
    )
    return {
        "name": node.metadata.name,
        "capacity": amounts(status.capacity if status else None),
        "allocatable": amounts(status.allocatable if status else None),
        "gpu_model": labels.get(m.GPU_PRODUCT_LABEL, ""),
        "ready": ready,
        "schedulable": ready and not (node.spec and node.spec.unschedulable),
    }


# --- creating a launch's objects ------------------------------------------------------


def create_object(conn: Connection, manifest: dict) -> str:
    """Create one object; its uid. The answer is not turned into the client's model
    objects (`_preload_content=False`): that took more time than the request."""
    response = create_any(conn, manifest, _preload_content=False)
    return json.loads(response.data)["metadata"]["uid"]


def create_any(conn: Connection, manifest: dict, **options):
    """Create one namespaced object of a kind Gantry makes (`dry_run="All"`: the
    live tests' server-side validation)."""
    ns, kind = manifest["metadata"]["namespace"], manifest["kind"]
    options["_request_timeout"] = conn.timeout
    create = {
        "Secret": conn.core.create_namespaced_secret,
        "Service": conn.core.create_namespaced_service,
        "Pod": conn.core.create_namespaced_pod,
        "ResourceQuota": conn.core.create_namespaced_resource_quota,
        "LimitRange": conn.core.create_namespaced_limit_range,
        "NetworkPolicy": conn.networking.create_namespaced_network_policy,
        "Job": conn.batch.create_namespaced_job,
    }.get(kind)
    if create is None:
        raise ValueError(f"cannot create a {kind}")
    return create(ns, manifest, **options)


def delete_created(conn: Connection, manifest: dict) -> None:
    ns, name, kind = (
        manifest["metadata"]["namespace"],
        manifest["metadata"]["name"],
        manifest["kind"],
    )
    delete = {
        "Secret": conn.core.delete_namespaced_secret,
        "Service": conn.core.delete_namespaced_service,
        "Pod": conn.core.delete_namespaced_pod,
        "NetworkPolicy": conn.networking.delete_namespaced_network_policy,
        "Job": conn.batch.delete_namespaced_job,
    }[kind]
    delete(name, ns, propagation_policy="Foreground", _request_timeout=conn.timeout)


def await_quota(conn: Connection, manifest: dict, timeout: float = 10.0) -> None:
    """Wait until the quota controller has counted a new or changed quota (its
    `status.hard` matches the spec): quota admission checks pods against the counted
    state, so the attempt's pods then meet the quota as it now is. On the test
    cluster it was always counted within milliseconds; bounded, never fatal."""
    hard = {k: quantity(v) for k, v in manifest["spec"]["hard"].items()}
    if not hard:
        return
    name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    deadline = time.monotonic() + timeout
    while True:
        quota = conn.core.read_namespaced_resource_quota(name, ns, _request_timeout=conn.timeout)
        counted = (quota.status.hard or {}) if quota.status else {}
        if {k: quantity(v) for k, v in counted.items()} == hard:
            return
        if time.monotonic() > deadline:
            logger.warning("quota %s/%s not counted after %s s", ns, name, timeout)
            return
        time.sleep(0.1)
