"""platform/k8s/ (the manifests that deploy Gantry itself) is valid Kubernetes, strictly,
and its RBAC grants the backend what it uses and nothing else."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

PLATFORM = Path(__file__).resolve().parents[2] / "platform" / "k8s"
DOCS = [
    (path.name, doc)
    for path in sorted(PLATFORM.glob("*.yaml"))
    if path.name != "kustomization.yaml"
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]


@pytest.mark.parametrize("name,doc", DOCS, ids=[f"{n}:{d['kind']}" for n, d in DOCS])
def test_platform_manifests_validate_strictly(name, doc):
    kubernetes_validate.validate(doc, "1.31.0", strict=True)


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((PLATFORM / "kustomization.yaml").read_text())
    files = {p.name for p in PLATFORM.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_rbac_is_least_privilege():
    role = next(d for _, d in DOCS if d["kind"] == "ClusterRole")
    grants = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert grants[("", "secrets")] == {"create", "patch", "delete"}  # never read back
    assert grants[("", "nodes")] == {"get", "list", "watch"}
    assert "*" not in {v for verbs in grants.values() for v in verbs}
    assert not any("*" in key for key in grants)
    # Terminals (`gantry shell`, the job page's) exec into a running job's container: the
    # API server refuses them without this (found on the real node). Gantry's own check
    # decides who may; logs come from the executor, never from kubelet.
    assert grants[("", "pods/exec")] == {"get", "create"}
    assert ("", "pods/log") not in grants and ("", "pods/attach") not in grants
