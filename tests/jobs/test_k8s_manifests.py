"""Every manifest the Kubernetes backend sends, for every job kind and option, is valid
against the official Kubernetes OpenAPI schemas (strict: no unknown fields), and equal
to its golden file under tests/jobs/k8s_golden/ so a change is reviewed as a diff.

Regenerate the golden files after an intended change with
`GANTRY_UPDATE_GOLDEN=1 pytest tests/jobs/test_k8s_manifests.py` and review `git diff`.
"""

import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from jobs.compute.kubernetes import manifests as m

GOLDEN = Path(__file__).parent / "k8s_golden"
UPDATE = os.environ.get("GANTRY_UPDATE_GOLDEN") == "1"
# The oldest Kubernetes Gantry supports, and the newest schemas the package ships.
VERSIONS = ("1.31.0", kubernetes_validate.utils.latest_version())

CFG = m.ManifestConfig(
    api_url="http://gantry-web.gantry.svc:8000",
    default_image="registry.example.org/gantry/pytorch:2.5",
    gpu_node_selectors={"A100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    gpu_tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
)
WITH_PULL_SECRETS = m.ManifestConfig(**{**CFG.__dict__, "image_pull_secrets": ("regcred",)})


def spec(**kw):
    base = {"id": 42, "attempt": 1, "kind": "train", "tenant_slug": "lab-a", "name": "resnet"}
    return m.JobSpec(**{**base, **kw})


def tokens(n):
    return {rank: f"gjt_{rank}_not-a-real-secret" for rank in range(n)}


CASES = {
    "train-cpu": (spec(), CFG),
    "train-gpu": (spec(gpus=1, cpus=8, memory_mb=32768), CFG),
    "train-gpu-model": (spec(gpus=2, gpu_model="A100"), CFG),
    "train-gpu-model-unmapped": (spec(gpus=1, gpu_model="NVIDIA-H100-80GB-HBM3"), CFG),
    "train-pull-secrets": (spec(image="registry.example.org/lab-a/custom:1"), WITH_PULL_SECRETS),
    "train-retries-timeout": (spec(max_retries=3, attempt=2, timeout_seconds=7200), CFG),
    "distributed-2": (spec(kind="distributed", workers=2, gpus=1), CFG),
    "distributed-4": (spec(kind="distributed", workers=4, gpus=8, gpu_model="A100"), CFG),
    "distributed-cpu": (spec(kind="distributed", workers=2), CFG),
    "notebook": (spec(kind="notebook", name="explore"), CFG),
    "notebook-gpu": (spec(kind="notebook", gpus=1), WITH_PULL_SECRETS),
}
TENANTS = {
    "tenant-quota": m.QuotaSpec(gpus=6, cpus=64, memory_mb=262144),
    "tenant-gpus-only": m.QuotaSpec(gpus=2),
    "tenant-no-quota": None,
}


def all_manifests():
    for case, (s, cfg) in CASES.items():
        yield case, m.job_manifests(s, cfg, tokens(s.workers))
    for case, quota in TENANTS.items():
        yield case, m.tenant_manifests("lab_A.1", quota, CFG)


def check_golden(name: str, manifests: list[dict]) -> None:
    text = yaml.safe_dump_all(manifests, sort_keys=True, default_flow_style=False)
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with GANTRY_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from {path} (GANTRY_UPDATE_GOLDEN=1)"


@pytest.mark.parametrize(
    "name,manifests", list(all_manifests()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_manifests_validate_strictly_and_match_golden(name, manifests):
    for manifest in manifests:
        for version in VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)
    check_golden(name, manifests)


def test_strict_validation_rejects_unknown_fields():
    job = m.batch_job(spec(), CFG)
    job["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSIONS[0], strict=True)


def test_distributed_workers_get_the_torchrun_contract_from_their_index():
    job = m.batch_job(spec(kind="distributed", workers=4, gpus=2), CFG)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == "gantry-job-42-a1"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    for name in ("PET_NODE_RANK", "RANK", "GANTRY_WORKER_RANK"):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == index
    assert env["PET_NNODES"]["value"] == "4"
    assert env["PET_NPROC_PER_NODE"]["value"] == "2"
    assert env["PET_MASTER_ADDR"]["value"] == "gantry-job-42-a1-0.gantry-job-42-a1"
    assert env["MASTER_ADDR"]["value"] == env["PET_MASTER_ADDR"]["value"]
    assert env["PET_MASTER_PORT"]["value"] == env["MASTER_PORT"]["value"] == "29500"
    assert env["WORLD_SIZE"]["value"] == "4"
    service = m.headless_service(spec(kind="distributed", workers=4), CFG)
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["name"] == pod["subdomain"]
    assert service["spec"]["selector"] == {"gantry.dev/job-id": "42", "gantry.dev/attempt": "1"}


def test_retries_are_gantrys_kubernetes_never_retries_a_pod():
    job = m.batch_job(spec(max_retries=3, attempt=2), CFG)
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["name"] == "gantry-job-42-a2"  # a new Job per attempt
    assert job["metadata"]["annotations"]["gantry.dev/max-attempts"] == "4"
    actions = [r["action"] for r in job["spec"]["podFailurePolicy"]["rules"]]
    assert actions == ["FailJob", "FailJob"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_gpus_selectors_tolerations_and_pull_secrets():
    pod = m.pod_spec(spec(gpus=2, gpu_model="A100"), WITH_PULL_SECRETS)
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    cpu_pod = m.pod_spec(spec(), CFG)
    assert "nvidia.com/gpu" not in cpu_pod["containers"][0]["resources"]["limits"]
    assert "tolerations" not in cpu_pod and "nodeSelector" not in cpu_pod


def test_executor_is_the_entrypoint_with_its_token_from_the_secret():
    manifests = m.job_manifests(spec(kind="distributed", workers=2), CFG, tokens(2))
    secret = manifests[0]
    assert secret["kind"] == "Secret"
    assert secret["stringData"] == {"0": "gjt_0_not-a-real-secret", "1": "gjt_1_not-a-real-secret"}
    pod = manifests[-1]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["python", "-m", "executor"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GANTRY_API_URL"] == "http://gantry-web.gantry.svc:8000"
    assert env["GANTRY_JOB_TOKEN_FILE"] == m.TOKEN_DIR
    assert "GANTRY_JOB_TOKEN" not in env
    volume = next(v for v in pod["volumes"] if v["name"] == "gantry-token")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False


def test_tenant_quota_becomes_the_namespace_resource_quota():
    ns, quota, limits, _jobs, policy = m.tenant_manifests(
        "lab_A.1", m.QuotaSpec(6, 64, 262144), CFG
    )
    assert ns["metadata"]["name"] == "gantry-lab-a-1"
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "6",
        "requests.cpu": "64",
        "requests.memory": "262144Mi",
    }
    (limit,) = limits["spec"]["limits"]
    assert limit["max"] == {"nvidia.com/gpu": "6"}
    # A container naming no GPUs gets none (not the max, the API server's default).
    assert limit["default"]["nvidia.com/gpu"] == limit["defaultRequest"]["nvidia.com/gpu"] == "0"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"gantry.dev/kind": "notebook"}}
    assert m.tenant_manifests("x", None, CFG)[1]["spec"]["hard"] == {}


def test_namespace_names_are_dns_labels():
    assert m.namespace_name("Lab_A") == "gantry-lab-a"
    assert len(m.namespace_name("x" * 80)) == 63


def pod_specs():
    for case, (s, cfg) in CASES.items():
        workload = m.job_manifests(s, cfg, tokens(s.workers))[-1]
        yield (
            case,
            workload["spec"] if workload["kind"] == "Pod" else workload["spec"]["template"]["spec"],
        )


@pytest.mark.parametrize(
    "case,pod", list(pod_specs()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_pod_runs_unprivileged(case, pod):
    """Non-root, RuntimeDefault seccomp, no capabilities, no service-account token, a
    read-only root filesystem with writable volumes where a job writes."""
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
        assert sc["readOnlyRootFilesystem"] is True
        mounts = {v["mountPath"] for v in container["volumeMounts"] if not v.get("readOnly")}
        assert {m.WORKDIR, "/tmp", "/dev/shm"} <= mounts
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HOME"] == "/tmp"


def test_jobs_reach_gantrys_api_and_dns_only_and_a_gang_only_itself():
    policies = {
        p["metadata"]["name"]: p["spec"]
        for p in m.tenant_manifests("lab-a", None, CFG)
        if p["kind"] == "NetworkPolicy"
    }
    jobs = policies["gantry-jobs"]
    assert jobs["podSelector"] == {"matchLabels": m.MANAGED_BY}
    assert jobs["policyTypes"] == ["Ingress", "Egress"] and jobs["ingress"] == []
    api, dns = jobs["egress"]
    assert api == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gantry"}},
                "podSelector": {"matchLabels": m.WEB_LABELS},
            }
        ]
    }
    assert {p["port"] for p in dns["ports"]} == {53}
    # A train job or notebook gets no policy of its own; a distributed attempt one that
    # names only its own pods, both ways.
    for case in ("train-gpu", "notebook"):
        s, cfg = CASES[case]
        assert not [x for x in m.job_manifests(s, cfg, tokens(1)) if x["kind"] == "NetworkPolicy"]
    s, cfg = CASES["distributed-2"]
    (gang,) = [x for x in m.job_manifests(s, cfg, tokens(2)) if x["kind"] == "NetworkPolicy"]
    own = {"podSelector": {"matchLabels": {"gantry.dev/job-id": "42", "gantry.dev/attempt": "1"}}}
    assert gang["spec"]["podSelector"] == own["podSelector"]
    assert gang["spec"]["ingress"] == [{"from": [own]}]
    assert gang["spec"]["egress"] == [{"to": [own]}]
    # The platform's web pods carry the labels the policy names.
    web = yaml.safe_load_all(
        (Path(__file__).resolve().parents[2] / "platform/k8s/web.yaml").read_text()
    )
    deployment = next(d for d in web if d and d["kind"] == "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert m.WEB_LABELS.items() <= labels.items()


def test_what_the_workload_owns_is_created_owned_and_strictly_valid():
    """The backend creates the workload first, then the rest already owned by it (no patch
    afterwards): the owned copies carry the reference, the originals are left as they were."""
    manifests = m.job_manifests(spec(kind="distributed", workers=2), CFG, tokens(2))
    *owned, workload = manifests
    assert workload["kind"] == "Job" and [x["kind"] for x in owned] == ["Secret", "NetworkPolicy", "Service"]
    ref = m.owner_reference("Job", "batch/v1", workload["metadata"]["name"], "0c8b-uid")
    for manifest in owned:
        copy = m.owned_by(manifest, ref)
        assert copy["metadata"]["ownerReferences"] == [ref]
        assert "ownerReferences" not in manifest["metadata"]
        assert copy["metadata"]["name"] == manifest["metadata"]["name"]
        for version in VERSIONS:
            kubernetes_validate.validate(copy, version, strict=True)
