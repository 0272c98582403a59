"""The machines behind Gantry: this machine and the nodes of every registered Kubernetes
cluster, with capacity, allocatable GPUs, GPU model, who holds them and utilization (the
cluster page). It reads jobs and the backends, so it lives above both: cluster keeps the
utilization sources (`cluster.nodes`) and the registered clusters.
"""

from __future__ import annotations

import socket
from collections import defaultdict

from django.conf import settings

from cluster.models import KubernetesCluster
from cluster.nodes import nvml_gpu_utilization, prometheus_gpu_utilization
from jobs.compute import get_backend
from jobs.models import Job
from jobs.states import ACTIVE


def _holders(user) -> dict[tuple[str, str], list[dict]]:
    """(cluster, node) -> the active jobs on it. Jobs the user may not see show only as
    "another tenant" with their GPU count: the page is open to every signed-in user."""
    active = list(
        Job.objects.filter(state__in=ACTIVE).select_related("project__tenant").only(
            "pk", "name", "backend", "gpus", "workers", "placement", "project__tenant__name"
        )
    )
    visible = set(
        Job.objects.visible_to(user).filter(pk__in=[j.pk for j in active]).values_list("pk", flat=True)
    )
    local_name = socket.gethostname()
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for job in active:
        placement = job.placement or {}
        if job.backend == "kubernetes":
            cluster = placement.get("cluster", "")
            per_node: dict[str, int] = defaultdict(int)
            for node in (placement.get("hosts") or {}).values():
                per_node[node] += 1
        else:
            cluster = ""
            per_node = {local_name: job.workers}
        for node, workers in per_node.items():
            seen = job.pk in visible or user.is_superuser
            out[(cluster, node)].append(
                {
                    "job": job if seen else None,
                    "tenant": job.project.tenant.name if seen else "another tenant",
                    "gpus": job.gpus * workers,
                }
            )
    return out


def machine_rows(user) -> tuple[list[dict], list[str]]:
    """Rows for the cluster page, and the problems met (a cluster that does not answer)."""
    from jobs.compute.kubernetes.backend import KubernetesBackend
    from jobs.compute.kubernetes.client import ClusterError, registered_clusters

    holders = _holders(user)
    problems: list[str] = []
    rows = []
    local = get_backend("local")
    capacity = local.capacity()
    name = socket.gethostname()
    rows.append(
        {
            "cluster": "this machine",
            "name": name,
            "ready": True,
            "cpus": capacity.cpus,
            "memory_mb": capacity.memory_mb,
            "gpus_capacity": capacity.gpu_count,
            "gpus": capacity.gpu_count,
            "gpu_model": ", ".join(sorted({g.name for g in capacity.gpus if g.name})),
            "holders": holders.get(("", name), []),
            "utilization": nvml_gpu_utilization(),
        }
    )
    if settings.GANTRY_JOB_BACKEND != "kubernetes" and not KubernetesCluster.objects.exists():
        return rows, problems
    backend = get_backend("kubernetes")
    assert isinstance(backend, KubernetesBackend)
    try:
        utilization = prometheus_gpu_utilization()
    except Exception as exc:
        utilization = {}
        problems.append(f"Prometheus at {settings.GANTRY_PROMETHEUS_URL} did not answer: {exc}")
    for ref in registered_clusters():
        try:
            details = backend.node_details(ref)
        except ClusterError as exc:
            problems.append(str(exc))
            continue
        for d in details:
            rows.append(
                {
                    "cluster": ref.name,
                    "name": d["name"],
                    "ready": d["schedulable"],
                    "cpus": d["allocatable"]["cpus"],
                    "memory_mb": d["allocatable"]["memory_mb"],
                    "gpus_capacity": d["capacity"]["gpus"],
                    "gpus": d["allocatable"]["gpus"],
                    "gpu_model": d["gpu_model"],
                    "holders": holders.get((ref.name, d["name"]), []),
                    "utilization": utilization.get(d["name"]),
                }
            )
    return rows, problems
