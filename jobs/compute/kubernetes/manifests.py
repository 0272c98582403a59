"""Kubernetes manifests for Gantry jobs: pure functions from plain values to dicts.

Nothing here talks to a cluster, so every manifest can be validated against the
Kubernetes OpenAPI schemas and kept as a golden file (tests/jobs/test_k8s_manifests.py).
`jobs.compute.kubernetes.backend` builds a `JobSpec` from a Job row and sends these.

What each kind becomes, in the tenant's namespace (`gantry-<tenant slug>`):

* every job: a Secret `<name>-token` with one key per worker rank holding that rank's
  executor token, mounted read-only at /var/run/gantry/token; the executor
  (`python -m executor`, the container's entrypoint) reads `<dir>/<rank>` through
  `GANTRY_JOB_TOKEN_FILE`. One mount serves all pods of an Indexed Job, whose pods
  share one template and so could not each get their own `secretKeyRef`.
* `train`: a batch/v1 Job with one pod.
* `distributed`: an Indexed Job (completions = parallelism = workers) plus a headless
  Service named like the Job, so worker i is reachable as `<name>-<i>.<name>`, and a
  NetworkPolicy that lets the gang's pods (and only they) reach each other; every
  worker gets torchrun's contract (PET_*) with PET_NODE_RANK and RANK from the
  job-completion index, and PET_MASTER_ADDR=`<name>-0.<name>`.
* `notebook`: a bare Pod running JupyterLab (through the executor) and a ClusterIP
  Service; a NetworkPolicy in the namespace admits traffic to notebook pods only from
  Gantry's own namespace, so a notebook is reached only through Gantry's proxy.

Every pod runs as a non-root user (`run_as_user`) with `seccompProfile: RuntimeDefault`,
every capability dropped, no service-account token and a read-only root filesystem (the
workspace, /tmp and /dev/shm are volumes); the namespace's `gantry-jobs` NetworkPolicy
lets Gantry's pods send only to Gantry's web pods and the cluster DNS, and take nothing
in that another policy (notebooks, the gang's own) does not add.

Retries belong to Gantry, not to Kubernetes: `backoffLimit: 0` and a podFailurePolicy
that fails the Job on the first non-zero exit or disruption. Each attempt is a new
Kubernetes Job named `…-a<attempt>` (the previous one may still be terminating), and
`jobs.services.end_attempt` decides, from `max_retries`, whether there is a next one.
If Kubernetes retried pods itself, a second pod of the same attempt would reuse the
attempt's token and log sequence numbers, and the attempt counter users see would lie.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MANAGED_BY = {"app.kubernetes.io/managed-by": "gantry"}
LABEL_JOB = "gantry.dev/job-id"
LABEL_ATTEMPT = "gantry.dev/attempt"
LABEL_KIND = "gantry.dev/kind"
LABEL_TENANT = "gantry.dev/tenant"
LABEL_RANK = "gantry.dev/rank"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTAINER = "executor"
TOKEN_DIR = "/var/run/gantry/token"
WORKDIR = "/workspace"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class ManifestConfig:
    """Cluster-wide choices (from settings and the KubernetesCluster row)."""

    api_url: str
    default_image: str
    namespace_prefix: str = "gantry-"
    platform_namespace: str = "gantry"
    gpu_node_selectors: dict = field(default_factory=dict)
    gpu_tolerations: tuple = ()
    image_pull_secrets: tuple = ()
    ttl_seconds_after_finished: int = 3600
    master_port: int = 29500
    notebook_port: int = 8888
    grace_seconds: int = 10
    final_flush_seconds: int = 300
    # Job pods never run as root: the user (and group, and fsGroup for the token
    # Secret's files) they run as, and whether the image's root filesystem is read-only
    # (the workspace, /tmp and /dev/shm are writable volumes either way).
    run_as_user: int = 1000
    read_only_root: bool = True
    # Pods use the node's network (tests and single-node labs: Gantry on the node's
    # loopback); the security settings above stay as they are.
    host_network: bool = False
    # The Pod Security Standard the tenant namespaces enforce (the API server's
    # PodSecurity admission): "restricted" admits Gantry's pods and refuses a pod that asks
    # for root, privilege, capabilities, host namespaces or host paths, whoever creates it.
    # Host-network pods cannot pass even "baseline": with host_network, "privileged".
    pod_security: str = "restricted"
    # GPU pods' executor telemetry period (GANTRY_GPU_SAMPLE_SECONDS; None: its default).
    gpu_sample_seconds: float | None = None


@dataclass(frozen=True)
class JobSpec:
    """The parts of a Job the manifests need (built by `kubernetes.spec_from_job`)."""

    id: int
    attempt: int
    kind: str
    tenant_slug: str
    name: str = ""
    image: str = ""
    gpus: int = 0
    cpus: int = 1
    memory_mb: int = 1024
    workers: int = 1
    max_retries: int = 0
    timeout_seconds: int | None = None
    gpu_model: str = ""


@dataclass(frozen=True)
class QuotaSpec:
    """A tenant's quota in Gantry (cluster.TenantQuota); None fields mean no limit."""

    gpus: int | None = None
    cpus: int | None = None
    memory_mb: int | None = None


# --- names ------------------------------------------------------------------------------


def dns_label(text: str, limit: int = 63) -> str:
    """`text` as an RFC 1123 label: lower case, [a-z0-9-], at most `limit` characters."""
    label = _DNS_LABEL.sub("-", text.lower()).strip("-")
    return label[:limit].rstrip("-") or "x"


def namespace_name(tenant_slug: str, prefix: str = "gantry-") -> str:
    return dns_label(prefix + tenant_slug)


def workload_name(job_id: int, attempt: int) -> str:
    """One name per attempt: the Job (or notebook Pod), its Service and its Secret prefix.

    Starts with a letter (Services need RFC 1035 labels) and stays short enough for an
    Indexed Job's pod host names (`<name>-<index>`).
    """
    return f"gantry-job-{job_id}-a{attempt}"


def object_name(spec: JobSpec) -> str:
    return workload_name(spec.id, spec.attempt)


def token_secret_name(spec: JobSpec) -> str:
    return f"{object_name(spec)}-token"


def labels(spec: JobSpec) -> dict[str, str]:
    return {
        **MANAGED_BY,
        LABEL_JOB: str(spec.id),
        LABEL_ATTEMPT: str(spec.attempt),
        LABEL_KIND: spec.kind,
        LABEL_TENANT: dns_label(spec.tenant_slug),
    }


def selector(spec: JobSpec) -> dict[str, str]:
    return {LABEL_JOB: str(spec.id), LABEL_ATTEMPT: str(spec.attempt)}


def _meta(spec: JobSpec, cfg: ManifestConfig, name: str, **extra) -> dict:
    meta = {
        "name": name,
        "namespace": namespace_name(spec.tenant_slug, cfg.namespace_prefix),
        "labels": labels(spec),
        "annotations": {
            "gantry.dev/job-name": spec.name[:200],
            "gantry.dev/max-attempts": str(spec.max_retries + 1),
        },
    }
    meta.update(extra)
    return meta


# --- the tenant's namespace -------------------------------------------------------------


WEB_LABELS = {"app.kubernetes.io/part-of": "gantry", "app.kubernetes.io/component": "web"}


def gantry_api_peer(cfg: ManifestConfig) -> dict:
    """Gantry's web pods (platform/k8s/web.yaml), where a job's executor reports."""
    return {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": cfg.platform_namespace}
        },
        "podSelector": {"matchLabels": dict(WEB_LABELS)},
    }


def pod_security_labels(cfg: ManifestConfig) -> dict[str, str]:
    """The namespace labels PodSecurity admission acts on: enforce, and audit and warn at
    the same level, against the API server's own version of the standard."""
    level = "privileged" if cfg.host_network else cfg.pod_security
    labels = {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "audit", "warn")}
    return {**labels, "pod-security.kubernetes.io/enforce-version": "latest"}


def tenant_manifests(tenant_slug: str, quota: QuotaSpec | None, cfg: ManifestConfig) -> list[dict]:
    """Namespace, ResourceQuota, LimitRange and the notebook NetworkPolicy of a tenant.

    The ResourceQuota mirrors the tenant's quota in Gantry (guaranteed + borrowable
    GPUs, max CPUs, max memory); a limit Gantry does not set is absent, and a tenant
    without a quota gets an empty `hard` so an earlier limit is lifted on the next apply.
    """
    ns = namespace_name(tenant_slug, cfg.namespace_prefix)
    tenant_labels = {**MANAGED_BY, LABEL_TENANT: dns_label(tenant_slug)}
    hard: dict[str, str] = {}
    quota = quota or QuotaSpec()
    if quota.gpus is not None:
        hard[f"requests.{GPU_RESOURCE}"] = str(quota.gpus)
    if quota.cpus is not None:
        hard["requests.cpu"] = str(quota.cpus)
    if quota.memory_mb is not None:
        hard["requests.memory"] = f"{quota.memory_mb}Mi"
    limit = {
        "type": "Container",
        # For containers Gantry did not make (kubectl run in the namespace): without
        # requests they would slip past the ResourceQuota's requests.* accounting.
        "default": {"cpu": "1", "memory": "1024Mi"},
        "defaultRequest": {"cpu": "1", "memory": "1024Mi"},
    }
    if quota.gpus is not None:
        # No single container may ask for more GPUs than the whole tenant may hold. With a
        # max and no default of its own, the API server defaults a container's GPU limit
        # (and so its request) to that max: every container naming no GPUs (a CPU job's,
        # an endpoint's model-fetching init container) would ask for all of the tenant's.
        limit["max"] = {GPU_RESOURCE: str(quota.gpus)}
        limit["default"][GPU_RESOURCE] = "0"
        limit["defaultRequest"][GPU_RESOURCE] = "0"
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {**tenant_labels, **pod_security_labels(cfg)}},
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gantry-quota", "namespace": ns, "labels": tenant_labels},
            "spec": {"hard": hard},
        },
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "gantry-limits", "namespace": ns, "labels": tenant_labels},
            "spec": {"limits": [limit]},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "gantry-jobs", "namespace": ns, "labels": tenant_labels},
            "spec": {
                # Every pod Gantry makes: no traffic in (the notebook and gang policies
                # add what they need; policies only ever add), out only to Gantry's API
                # and the cluster's DNS.
                "podSelector": {"matchLabels": dict(MANAGED_BY)},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": [
                    {"to": [gantry_api_peer(cfg)]},
                    {
                        "to": [
                            {
                                "namespaceSelector": {},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [
                            {"protocol": "UDP", "port": 53},
                            {"protocol": "TCP", "port": 53},
                        ],
                    },
                ],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "gantry-notebooks", "namespace": ns, "labels": tenant_labels},
            "spec": {
                "podSelector": {"matchLabels": {LABEL_KIND: "notebook"}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {
                                        "kubernetes.io/metadata.name": cfg.platform_namespace
                                    }
                                }
                            }
                        ]
                    }
                ],
            },
        },
    ]


# --- pods -------------------------------------------------------------------------------


def _env(name: str, value: str) -> dict:
    return {"name": name, "value": str(value)}


def _index_env(name: str) -> dict:
    return {
        "name": name,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
    }


def _resources(spec: JobSpec) -> dict:
    amounts = {"cpu": str(spec.cpus), "memory": f"{spec.memory_mb}Mi"}
    if spec.gpus:
        amounts[GPU_RESOURCE] = str(spec.gpus)
    # requests == limits: Guaranteed QoS, and the ResourceQuota counts what is reserved.
    return {"requests": dict(amounts), "limits": dict(amounts)}


def gpu_node_selector(spec: JobSpec, cfg: ManifestConfig) -> dict[str, str]:
    if not spec.gpus or not spec.gpu_model:
        return {}
    chosen = cfg.gpu_node_selectors.get(spec.gpu_model)
    return dict(chosen) if chosen else {GPU_PRODUCT_LABEL: spec.gpu_model}


def executor_env(spec: JobSpec, cfg: ManifestConfig) -> list[dict]:
    indexed = spec.kind == "distributed"
    env = [
        _env("GANTRY_API_URL", cfg.api_url),
        _env("GANTRY_JOB_ID", spec.id),
        _index_env("GANTRY_WORKER_RANK") if indexed else _env("GANTRY_WORKER_RANK", "0"),
        _env("GANTRY_JOB_TOKEN_FILE", TOKEN_DIR),
        _env("GANTRY_WORKDIR", WORKDIR),
        _env("GANTRY_FINAL_FLUSH_SECONDS", cfg.final_flush_seconds),
        # The user the pod runs as may have no home in the image (and its root
        # filesystem is read-only): caches and Jupyter's runtime files go to /tmp.
        _env("HOME", "/tmp"),
    ]
    if spec.gpus and cfg.gpu_sample_seconds is not None:
        env.append(_env("GANTRY_GPU_SAMPLE_SECONDS", f"{cfg.gpu_sample_seconds:g}"))
    if indexed:
        name = object_name(spec)
        master = f"{name}-0.{name}"
        n = str(spec.workers)
        # One executor per pod runs the command once: plain `python train.py` sees
        # RANK/WORLD_SIZE per pod; `torchrun` reads PET_* and starts one process per
        # GPU (it then sets RANK/WORLD_SIZE/LOCAL_RANK for its children itself).
        env += [
            _env("PET_NNODES", n),
            _env("PET_NPROC_PER_NODE", max(spec.gpus, 1)),
            _index_env("PET_NODE_RANK"),
            _env("PET_MASTER_ADDR", master),
            _env("PET_MASTER_PORT", cfg.master_port),
            _env("MASTER_ADDR", master),
            _env("MASTER_PORT", cfg.master_port),
            _env("WORLD_SIZE", n),
            _index_env("RANK"),
            _index_env("GROUP_RANK"),
            _env("LOCAL_RANK", "0"),
            _env("LOCAL_WORLD_SIZE", "1"),
        ]
    return env


def pod_spec(spec: JobSpec, cfg: ManifestConfig) -> dict:
    ports = []
    if spec.kind == "distributed":
        ports.append({"name": "torch", "containerPort": cfg.master_port, "protocol": "TCP"})
    if spec.kind == "notebook":
        ports.append({"name": "http", "containerPort": cfg.notebook_port, "protocol": "TCP"})
    container = {
        "name": CONTAINER,
        "image": spec.image or cfg.default_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "executor"],
        "workingDir": WORKDIR,
        "env": executor_env(spec, cfg),
        "resources": _resources(spec),
        "volumeMounts": [
            {"name": "gantry-token", "mountPath": TOKEN_DIR, "readOnly": True},
            {"name": "workspace", "mountPath": WORKDIR},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": cfg.read_only_root,
            "runAsNonRoot": True,
        },
    }
    if ports:
        container["ports"] = ports
    body = {
        "restartPolicy": "Never",
        # The job talks to Gantry, never to the Kubernetes API.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # The executor's own grace (SIGTERM -> SIGKILL of the command), plus time to
        # report and flush its last log lines.
        "terminationGracePeriodSeconds": cfg.grace_seconds + 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": cfg.run_as_user,
            "runAsGroup": cfg.run_as_user,
            "fsGroup": cfg.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {
                "name": "gantry-token",
                "secret": {"secretName": token_secret_name(spec), "defaultMode": 0o400},
            },
            {"name": "workspace", "emptyDir": {}},
            # PyTorch's DataLoader workers share tensors through /dev/shm (64 MiB by default).
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            # With a read-only root filesystem: HOME, caches and temporary files.
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    selector_labels = gpu_node_selector(spec, cfg)
    if selector_labels:
        body["nodeSelector"] = selector_labels
    if spec.gpus and cfg.gpu_tolerations:
        body["tolerations"] = [dict(t) for t in cfg.gpu_tolerations]
    if cfg.image_pull_secrets:
        body["imagePullSecrets"] = [{"name": name} for name in cfg.image_pull_secrets]
    if spec.kind == "distributed":
        body["subdomain"] = object_name(spec)
    if cfg.host_network:
        body["hostNetwork"] = True
    return body


def pod_failure_policy() -> dict:
    return {
        "rules": [
            # The executor's exit code is the command's: any failure ends the attempt
            # at once (for an Indexed Job: every other worker is stopped too).
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
            },
            # Evicted, preempted, node drained: also the end of the attempt; the watcher
            # reports the worker lost, and Gantry retries if the job has retries left.
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }


def batch_job(spec: JobSpec, cfg: ManifestConfig) -> dict:
    name = object_name(spec)
    template_labels = labels(spec)
    if spec.kind != "distributed":
        template_labels[LABEL_RANK] = "0"
    job_spec: dict = {
        "backoffLimit": 0,
        "podFailurePolicy": pod_failure_policy(),
        "ttlSecondsAfterFinished": cfg.ttl_seconds_after_finished,
        "template": {
            "metadata": {"labels": template_labels},
            "spec": pod_spec(spec, cfg),
        },
    }
    if spec.timeout_seconds:
        # A backstop for when Gantry is down: the executor and reconcile enforce the
        # timeout first; this leaves them room for the grace period and the last flush.
        job_spec["activeDeadlineSeconds"] = (
            spec.timeout_seconds + cfg.grace_seconds + cfg.final_flush_seconds + 600
        )
    if spec.kind == "distributed":
        job_spec.update(
            {"completionMode": "Indexed", "completions": spec.workers, "parallelism": spec.workers}
        )
    else:
        job_spec.update({"completions": 1, "parallelism": 1})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(spec, cfg, name),
        "spec": job_spec,
    }


def headless_service(spec: JobSpec, cfg: ManifestConfig) -> dict:
    name = object_name(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, cfg, name),
        "spec": {
            "clusterIP": "None",
            "selector": selector(spec),
            # Workers rendezvous before any of them is "ready".
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "torch",
                    "port": cfg.master_port,
                    "targetPort": cfg.master_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def gang_network_policy(spec: JobSpec, cfg: ManifestConfig) -> dict:
    """The workers of one distributed attempt reach each other (torchrun's rendezvous and
    collectives), and no other job's pods: added to the namespace's `gantry-jobs`."""

    def gang() -> dict:
        return {"podSelector": {"matchLabels": selector(spec)}}

    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(spec, cfg, object_name(spec)),
        "spec": {
            "podSelector": {"matchLabels": selector(spec)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [gang()]}],
            "egress": [{"to": [gang()]}],
        },
    }


def notebook_pod(spec: JobSpec, cfg: ManifestConfig) -> dict:
    meta = _meta(spec, cfg, object_name(spec))
    meta["labels"][LABEL_RANK] = "0"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(spec, cfg)}


def notebook_service(spec: JobSpec, cfg: ManifestConfig) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, cfg, object_name(spec)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(spec),
            "ports": [
                {
                    "name": "http",
                    "port": cfg.notebook_port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }


def token_secret(spec: JobSpec, cfg: ManifestConfig, tokens: dict[int, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(spec, cfg, token_secret_name(spec)),
        "stringData": {str(rank): token for rank, token in sorted(tokens.items())},
    }


def job_manifests(spec: JobSpec, cfg: ManifestConfig, tokens: dict[int, str]) -> list[dict]:
    """Everything one attempt needs: what the workload owns, then the workload (last).
    The backend creates the workload first and the others `owned_by` it."""
    out = [token_secret(spec, cfg, tokens)]
    if spec.kind == "notebook":
        out += [notebook_service(spec, cfg), notebook_pod(spec, cfg)]
    elif spec.kind == "distributed":
        out += [gang_network_policy(spec, cfg), headless_service(spec, cfg), batch_job(spec, cfg)]
    else:
        out.append(batch_job(spec, cfg))
    return out


def owner_reference(kind: str, api_version: str, name: str, uid: str) -> dict:
    """Makes Kubernetes delete the Secret and Service with the Job or Pod that owns them
    (ttlSecondsAfterFinished, or a cancel)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": True,
        "controller": False,
    }


def owned_by(manifest: dict, owner: dict) -> dict:
    """A copy of `manifest` owned by `owner` (an `owner_reference`), created that way in
    one request rather than patched afterwards."""
    meta = {**manifest["metadata"], "ownerReferences": [owner]}
    return {**manifest, "metadata": meta}
