"""Against a real Kubernetes cluster: run only when $KUBECONFIG points at one that answers.

They are deselected by default (pyproject's addopts): no cluster can exist on Gantry's CI
machines. Asked for without a reachable cluster, they skip with the reason. See the
README's "Kubernetes" section for running them against kind or k3s:

    kind create cluster && KUBECONFIG=~/.kube/config pytest -m k8s_live tests/jobs/test_k8s_live.py

They create and delete the namespace `gantry-live-test` (and objects in it) only.
"""

import os
import time
from pathlib import Path

import pytest

from jobs.backends import k8s_manifests as m

pytestmark = pytest.mark.k8s_live
TENANT = "live-test"


def _cluster_answers() -> str | None:
    path = os.environ.get("KUBECONFIG")
    if not path or not Path(path.split(os.pathsep)[0]).exists():
        return "KUBECONFIG does not point at a kubeconfig"
    from jobs.backends.kubernetes import ClusterRef, Connection, describe_error

    try:
        conn = Connection(ClusterRef("live"))
        conn.core.list_node(_request_timeout=10)
    except Exception as exc:
        return describe_error(exc, "live")
    return None


_PROBLEM = _cluster_answers()
if _PROBLEM:
    pytestmark = [pytestmark, pytest.mark.skip(reason=f"no live cluster: {_PROBLEM}")]


@pytest.fixture(scope="module")
def conn():
    from jobs.backends.kubernetes import ClusterRef, Connection

    conn = Connection(ClusterRef("live"))
    yield conn
    conn.core.delete_namespace(m.namespace_name(TENANT), propagation_policy="Foreground")


def test_nodes_report_allocatable_resources(conn):
    from jobs.backends.kubernetes import node_resources

    nodes = [node_resources(n) for n in conn.core.list_node().items]
    assert nodes and all(n["allocatable"]["cpus"] > 0 for n in nodes)


def test_every_generated_manifest_is_accepted_by_the_api_server(conn):
    """Server-side dry run: the API server's own validation and admission, nothing runs."""
    from kubernetes.client.exceptions import ApiException

    from jobs.backends.kubernetes import KubernetesBackend

    from .test_k8s_manifests import CASES, tokens

    cfg = CASES["train-cpu"][1]
    tenant = m.tenant_manifests(TENANT, m.QuotaSpec(gpus=2, cpus=8, memory_mb=8192), cfg)
    try:
        conn.core.create_namespace(tenant[0])
    except ApiException as exc:
        assert exc.status == 409
    for manifest in tenant[1:]:
        KubernetesBackend._create_any(conn, manifest, dry_run="All")
    for spec, case_cfg in CASES.values():
        spec = m.JobSpec(**{**spec.__dict__, "tenant_slug": TENANT})
        for manifest in m.job_manifests(spec, case_cfg, tokens(spec.workers)):
            KubernetesBackend._create_any(conn, manifest, dry_run="All")


def test_an_image_that_cannot_be_pulled_fails_the_job_and_leaves_nothing(
    conn, db, settings, owner, make_user
):
    from accounts import services as account_services
    from cluster.models import KubernetesCluster
    from jobs import services as job_services
    from jobs.admission import admission_pass
    from jobs.backends import get_backend, reset_backends
    from jobs.backends.k8s_watch import watches_for
    from projects import services as project_services

    settings.GANTRY_JOB_BACKEND = "kubernetes"
    settings.GANTRY_K8S_DEFAULT_IMAGE = "registry.invalid/gantry/does-not-exist:0"
    KubernetesCluster.objects.create(
        name="live", kubeconfig=Path(os.environ["KUBECONFIG"]).read_text(), is_default=True
    )
    reset_backends()
    tenant = account_services.create_tenant(actor=owner, name="Live", slug=TENANT)
    project = project_services.create_project(actor=owner, tenant=tenant, name="P", slug="p")
    job = job_services.submit_job(owner, project, command="python -c pass")
    admission_pass()
    job.refresh_from_db()
    job_services.launch_job(job)
    backend = get_backend()
    pods = watches_for(backend, backend.default_cluster())[0]
    pods.timeout_seconds = 20
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        pods.watch_once()
        job.refresh_from_db()
        if job.is_terminal:
            break
    assert job.state == "failed"
    assert "cannot be pulled" in job.state_reason
    ns, name = m.namespace_name(TENANT), f"gantry-job-{job.pk}-a1"
    from kubernetes.client.exceptions import ApiException

    try:
        found = conn.batch.read_namespaced_job(name, ns)
        assert found.metadata.deletion_timestamp is not None
    except ApiException as exc:
        assert exc.status == 404
