"""An endpoint on Kubernetes: its Deployment, Service and NetworkPolicy, valid against the
official schemas, with the job pods' security settings, and accepted and run by the
control plane the suite starts (kwok's nodes: no container really runs)."""

from __future__ import annotations

import ast
import time

import kubernetes_validate
import pytest

from endpoints import kubernetes as ek
from jobs.compute.kubernetes import manifests as m

CFG = m.ManifestConfig(
    api_url="http://gantry-web.gantry.svc:8000", default_image="gantry/executor:1"
)
SPEC = ek.EndpointSpec(
    id=7,
    tenant_slug="lab-a",
    name="digits",
    version_id=42,
    version_number=3,
    model_file="model.pkl",
    replicas=2,
    cpus=1,
    memory_mb=512,
)
VERSIONS = ("1.31.0", kubernetes_validate.utils.latest_version())
WAIT = 120  # a safety net against hanging, never a timing assertion


def test_the_manifests_validate_strictly():
    for manifest in ek.endpoint_manifests(SPEC, CFG, "gty_read_only_project_token"):
        for version in VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)


def test_endpoint_pods_have_the_job_pods_security_settings():
    job_pod = m.pod_spec(m.JobSpec(id=1, attempt=1, kind="train", tenant_slug="lab-a"), CFG)
    pod = ek.deployment(SPEC, CFG)["spec"]["template"]["spec"]
    assert pod["securityContext"] == job_pod["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for container in pod["initContainers"] + pod["containers"]:
        assert container["securityContext"] == job_pod["containers"][0]["securityContext"]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The model is read-only to the server; only Gantry's namespace may call it.
    server = pod["containers"][0]
    assert {"name": "model", "mountPath": ek.MODEL_DIR, "readOnly": True} in server["volumeMounts"]
    policy = ek.network_policy(SPEC, CFG)
    assert policy["spec"]["ingress"][0]["from"] == [m.gantry_api_peer(CFG)]


def test_gpus_are_requested_and_replicas_follow_the_request():
    spec = ek.EndpointSpec(**{**SPEC.__dict__, "gpus": 1, "replicas": 3})
    deployment = ek.deployment(spec, CFG)
    assert deployment["spec"]["replicas"] == 3
    limits = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits[m.GPU_RESOURCE] == "1"
    scaled_to_zero = ek.deployment(ek.EndpointSpec(**{**SPEC.__dict__, "replicas": 0}), CFG)
    assert scaled_to_zero["spec"]["replicas"] == 0


def test_the_server_runs_inference_in_its_own_process():
    """MLServer 1.7.1's parallel workers die on start in a real pod (each asks uvloop for an
    event loop before there is one): the server infers in its own process, as the local
    backend's replicas do (tests/jobs/test_k8s_real_node.py runs the pod)."""
    server = ek.deployment(SPEC, CFG)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["MLSERVER_PARALLEL_WORKERS"] == "0"


def test_a_payload_the_model_refuses_is_the_callers_error_as_on_the_local_backend():
    """The init container writes the local backend's checked runtimes beside
    model-settings.json and names the version's there (a bare MLServer answers a refused
    payload with 500; tests/jobs/test_k8s_real_node.py calls the pod with one)."""

    def fetch_env(spec):
        fetch = ek.deployment(spec, CFG)["spec"]["template"]["spec"]["initContainers"][0]
        return {e["name"]: e["value"] for e in fetch["env"]}

    env = fetch_env(SPEC)
    module = ast.parse(env["RUNTIME"], "gantry_runtime.py")  # MLServer is not here
    # Every runtime a version may name is defined there (the MLflow one on first use).
    classes = {c.name for c in ast.walk(module) if isinstance(c, ast.ClassDef)}
    assert classes == {"CheckedSKLearnModel", "CheckedTorchScriptModel", "CheckedMLflowModel"}
    assert {name.removeprefix("gantry_runtime.") for name in ek.IMPLEMENTATIONS.values()} == classes
    assert env["IMPLEMENTATION"] == "gantry_runtime.CheckedSKLearnModel"
    assert '"implementation": os.environ["IMPLEMENTATION"]' in ek.FETCH
    torchscript = ek.EndpointSpec(**{**SPEC.__dict__, "runtime": "torchscript"})
    assert fetch_env(torchscript)["IMPLEMENTATION"] == "gantry_runtime.CheckedTorchScriptModel"
    pyfunc = ek.EndpointSpec(**{**SPEC.__dict__, "runtime": "mlflow", "model_file": "."})
    assert fetch_env(pyfunc)["IMPLEMENTATION"] == "gantry_runtime.CheckedMLflowModel"
    assert fetch_env(pyfunc)["MODEL_FILE"] == f"{ek.MODEL_DIR}/."


@pytest.mark.k8s_live
@pytest.mark.slow
def test_the_control_plane_runs_the_endpoint_as_a_deployment(kube):
    from kubernetes import client, utils

    api = kube.client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace = m.namespace_name(SPEC.tenant_slug, CFG.namespace_prefix)
    if namespace not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": namespace}})
    for manifest in ek.endpoint_manifests(SPEC, CFG, "gty_read_only_project_token"):
        utils.create_from_dict(api, manifest, namespace=namespace)
    name = ek.object_name(SPEC)
    try:
        deadline = time.monotonic() + WAIT
        while (apps.read_namespaced_deployment(name, namespace).status.ready_replicas or 0) < 2:
            assert time.monotonic() < deadline, "the Deployment's pods never became ready"
            time.sleep(0.5)
        pods = core.list_namespaced_pod(
            namespace, label_selector=f"{ek.LABEL_ENDPOINT}={SPEC.id}"
        ).items
        assert len(pods) == 2
        job_pod = m.pod_spec(m.JobSpec(id=1, attempt=1, kind="train", tenant_slug="lab-a"), CFG)
        for pod in pods:
            assert pod.spec.security_context.run_as_non_root is True
            assert pod.spec.security_context.run_as_user == job_pod["securityContext"]["runAsUser"]
            assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
            assert pod.spec.automount_service_account_token is False
            for container in pod.spec.init_containers + pod.spec.containers:
                assert container.security_context.capabilities.drop == ["ALL"]
                assert container.security_context.allow_privilege_escalation is False
                assert container.security_context.read_only_root_filesystem is True
        service = core.read_namespaced_service(name, namespace)
        assert service.spec.selector == ek.selector(SPEC)
        # Scale to zero: the same Deployment with no replica; its pods go.
        apps.patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": 0}})
        deadline = time.monotonic() + WAIT
        while core.list_namespaced_pod(
            namespace, label_selector=f"{ek.LABEL_ENDPOINT}={SPEC.id}"
        ).items:
            assert time.monotonic() < deadline, "the pods of a Deployment scaled to zero stayed"
            time.sleep(0.5)
    finally:
        core.delete_namespace(namespace)
