"""An endpoint on Kubernetes: a Deployment and a Service per served version, pure
functions from plain values to manifests (nothing here talks to a cluster).

In the tenant's namespace (`gantry-<tenant>`), for each version an endpoint serves:

* a Deployment `ep-<endpoint id>-v<version>` with the endpoint's replicas, whose pods
  run MLServer (the serving image: GANTRY_K8S_ENDPOINT_IMAGE, `ENDPOINT_IMAGE` by
  default; platform/images/serving) on the model's files: an init
  container fetches them from Gantry's API (GET /api/v1/model-versions/<id>/ and its
  download/) with a read-only API token limited to the project (a Secret) into an
  emptyDir, the server reads them read-only; readiness is MLServer's own
  `/v2/models/<name>/ready`;
* a ClusterIP Service of the same name, port 80, which Gantry's gateway calls;
* a NetworkPolicy admitting traffic to these pods from Gantry's namespace only (the
  gateway): the tenant's `gantry-jobs` policy already keeps them from sending
  anywhere but Gantry and the cluster DNS.

The pods carry exactly the job pods' security settings, taken from
`jobs.compute.kubernetes.manifests.pod_spec` itself (non-root uid, RuntimeDefault
seccomp, every capability dropped, no privilege escalation, read-only root filesystem,
no service-account token), so the two cannot drift apart. Scaling to zero is the same
Deployment with `replicas: 0`. endpoints.k8s applies them to a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobs.compute.kubernetes import manifests as m

ENDPOINT_IMAGE = "docker.io/seldonio/mlserver:1.7.1-sklearn"
LABEL_ENDPOINT = "gantry.dev/endpoint-id"
LABEL_VERSION = "gantry.dev/model-version"
PORT = 8080
MODEL_DIR = "/mnt/model"

# The init container's fetch: the version's files from Gantry's API, then MLServer's
# model-settings.json beside them (standard library only: it runs in the serving image).
FETCH = r"""
import json, os, urllib.parse, urllib.request
api, version, name, number = os.environ["GANTRY_API"], os.environ["MODEL_VERSION"], os.environ["MODEL_NAME"], os.environ["MODEL_NUMBER"]
token = open("/var/run/gantry/token/token").read().strip()
def get(url):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    return urllib.request.urlopen(request, timeout=60)
listing = json.load(get(f"{api}/api/v1/model-versions/{version}/"))
for item in listing["files"]:
    path = os.path.join("/mnt/model", item["path"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    query = urllib.parse.urlencode({"path": item["path"]})
    with get(f"{api}/api/v1/model-versions/{version}/download/?{query}") as source, open(path, "wb") as out:
        out.write(source.read())
with open("/mnt/model/gantry_runtime.py", "w") as out:
    out.write(os.environ["RUNTIME"])
settings = {"name": name, "implementation": os.environ["IMPLEMENTATION"],
            "parameters": {"uri": os.environ["MODEL_FILE"], "version": "v" + number}}
json.dump(settings, open("/mnt/model/model-settings.json", "w"))
"""

# The runtime the local backend's replicas serve with (400 with scikit-learn's words for a
# payload the model refuses, where MLServer answers a bare 500), written beside
# model-settings.json, where MLServer imports a model's own runtime from.
RUNTIME = (Path(__file__).parent / "runtime" / "gantry_runtime.py").read_text()
# Its runtimes by the name endpoints.local.served_file gives (as the local replicas'
# serve_model.RUNTIMES), as model-settings.json names them.
IMPLEMENTATIONS = {
    "sklearn": "gantry_runtime.CheckedSKLearnModel",
    "torchscript": "gantry_runtime.CheckedTorchScriptModel",
    "mlflow": "gantry_runtime.CheckedMLflowModel",
}


@dataclass(frozen=True)
class EndpointSpec:
    """What the manifests need of one served version of an endpoint."""

    id: int
    tenant_slug: str
    name: str
    version_id: int
    version_number: int
    model_file: str
    replicas: int = 1
    cpus: int = 1
    memory_mb: int = 1024
    gpus: int = 0
    image: str = ENDPOINT_IMAGE
    runtime: str = "sklearn"  # endpoints.local.served_file's name (IMPLEMENTATIONS)


def object_name(spec: EndpointSpec) -> str:
    return version_object_name(spec.id, spec.version_number)


def version_object_name(endpoint_id: int, version_number: int) -> str:
    """The name of the Deployment, Service and NetworkPolicy of one served version."""
    return m.dns_label(f"ep-{endpoint_id}-v{version_number}")


def token_secret_name(spec: EndpointSpec) -> str:
    return endpoint_token_secret_name(spec.id)


def endpoint_token_secret_name(endpoint_id: int) -> str:
    """The Secret of the endpoint's read-only token (one for all its versions)."""
    return m.dns_label(f"ep-{endpoint_id}-token")


def service_url(endpoint_id: int, version_number: int, namespace: str) -> str:
    """Where Gantry's gateway calls one served version: its Service's cluster DNS name."""
    return f"http://{version_object_name(endpoint_id, version_number)}.{namespace}.svc:80"


def labels(spec: EndpointSpec) -> dict[str, str]:
    return {
        **m.MANAGED_BY,
        m.LABEL_TENANT: spec.tenant_slug,
        m.LABEL_KIND: "endpoint",
        LABEL_ENDPOINT: str(spec.id),
        LABEL_VERSION: str(spec.version_number),
    }


def selector(spec: EndpointSpec) -> dict[str, str]:
    return {LABEL_ENDPOINT: str(spec.id), LABEL_VERSION: str(spec.version_number)}


def _meta(spec: EndpointSpec, cfg: m.ManifestConfig, name: str) -> dict:
    return {
        "name": name,
        "namespace": m.namespace_name(spec.tenant_slug, cfg.namespace_prefix),
        "labels": labels(spec),
    }


def job_security(cfg: m.ManifestConfig) -> tuple[dict, dict]:
    """(pod securityContext, container securityContext) of a job pod, from jobs' own
    manifest code."""
    job = m.JobSpec(id=0, attempt=1, kind="train", tenant_slug="x")
    pod = m.pod_spec(job, cfg)
    return dict(pod["securityContext"]), dict(pod["containers"][0]["securityContext"])


def _resources(spec: EndpointSpec) -> dict:
    amounts = {"cpu": str(spec.cpus), "memory": f"{spec.memory_mb}Mi"}
    if spec.gpus:
        amounts[m.GPU_RESOURCE] = str(spec.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def deployment(spec: EndpointSpec, cfg: m.ManifestConfig) -> dict:
    pod_security, container_security = job_security(cfg)
    name = object_name(spec)
    mounts = [{"name": "model", "mountPath": MODEL_DIR}, {"name": "tmp", "mountPath": "/tmp"}]
    fetch = {
        "name": "fetch-model",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", FETCH],
        "env": [
            {"name": "GANTRY_API", "value": cfg.api_url},
            {"name": "MODEL_VERSION", "value": str(spec.version_id)},
            {"name": "MODEL_NUMBER", "value": str(spec.version_number)},
            {"name": "MODEL_NAME", "value": spec.name},
            {"name": "MODEL_FILE", "value": f"{MODEL_DIR}/{spec.model_file}"},
            {"name": "RUNTIME", "value": RUNTIME},
            {"name": "IMPLEMENTATION", "value": IMPLEMENTATIONS[spec.runtime]},
        ],
        "resources": _resources(spec) if not spec.gpus else {},
        "volumeMounts": [*mounts, {"name": "token", "mountPath": m.TOKEN_DIR, "readOnly": True}],
        "securityContext": dict(container_security),
    }
    if not fetch["resources"]:
        del fetch["resources"]
    server = {
        "name": "mlserver",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mlserver", "start", MODEL_DIR],
        "env": [
            {"name": "MLSERVER_HTTP_PORT", "value": str(PORT)},
            {"name": "MLSERVER_METRICS_ENDPOINT", "value": ""},
            # Inference in the server's own process, as the local backend's replicas run
            # (endpoints/runtime/serve_model.py): MLServer 1.7.1's worker processes ask
            # uvloop for an event loop before there is one and die on start.
            {"name": "MLSERVER_PARALLEL_WORKERS", "value": "0"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": f"/v2/models/{spec.name}/ready", "port": PORT},
            "periodSeconds": 2,
        },
        "resources": _resources(spec),
        "volumeMounts": [
            {"name": "model", "mountPath": MODEL_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": dict(container_security),
    }
    pod = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security,
        "initContainers": [fetch],
        "containers": [server],
        "volumes": [
            {
                "name": "token",
                "secret": {"secretName": token_secret_name(spec), "defaultMode": 0o400},
            },
            {"name": "model", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if spec.gpus and cfg.gpu_tolerations:
        pod["tolerations"] = [dict(t) for t in cfg.gpu_tolerations]
    if cfg.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in cfg.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(spec, cfg, name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector(spec)},
            # A new version is a new Deployment (Gantry rolls between them); within one,
            # a pod is replaced only once its successor is ready.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {"metadata": {"labels": labels(spec)}, "spec": pod},
        },
    }


def service(spec: EndpointSpec, cfg: m.ManifestConfig) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, cfg, object_name(spec)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(spec),
            "ports": [{"name": "http", "port": 80, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def network_policy(spec: EndpointSpec, cfg: m.ManifestConfig) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(spec, cfg, object_name(spec)),
        "spec": {
            "podSelector": {"matchLabels": selector(spec)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [m.gantry_api_peer(cfg)],
                    "ports": [{"port": PORT, "protocol": "TCP"}],
                }
            ],
        },
    }


def token_secret(spec: EndpointSpec, cfg: m.ManifestConfig, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(spec, cfg, token_secret_name(spec)),
        "type": "Opaque",
        "stringData": {"token": token},
    }


def endpoint_manifests(spec: EndpointSpec, cfg: m.ManifestConfig, token: str) -> list[dict]:
    return [
        token_secret(spec, cfg, token),
        deployment(spec, cfg),
        service(spec, cfg),
        network_policy(spec, cfg),
    ]
