"""Gantry against a real Kubernetes control plane: etcd, kube-apiserver (RBAC, the default
admission plugins: ResourceQuota, LimitRanger, ServiceAccount, PodSecurity, ...),
kube-controller-manager (the Job, garbage-collection, quota and pod-GC controllers) and
kube-scheduler, built from their Go modules, with kwok playing the kubelets of fake GPU
nodes (tests/k8s_cluster.py; the binaries come from platform/dev/k8s-build).

One cluster per pytest process. Without the binaries these tests skip with the reason,
except under CI=true, where a control plane that does not come up fails them.

Gantry talks to the cluster as the ServiceAccount of platform/k8s/ (a token for it), never
as the admin; the admin client here only plays what is not Gantry: kwok's pods' exit
(an annotation the kwok stages act on), evictions, a node going away. Where a kwok pod
cannot run the executor, the test plays it over Gantry's real HTTP API (`live_server`)
with the job token from the pod's Secret. Tests connect to loopback only: pod, node and
Service addresses of the cluster are never contacted.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from pathlib import Path

import pytest
import requests
import yaml

from jobs.compute.kubernetes import manifests as m
from tests.k8s_cluster import ClusterUnavailable, KubeCluster

pytestmark = [pytest.mark.k8s_live, pytest.mark.slow]

PLATFORM = Path(__file__).resolve().parents[2] / "platform" / "k8s"
EXIT = "stage.gantry.dev/exit-code"
UNPULLABLE = "registry.invalid/gantry/cannot-pull:1"
WAIT = 120  # a safety net against hanging, never a timing assertion


# --- the cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kube():
    try:
        cluster = KubeCluster().start()
    except ClusterUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Kubernetes control plane did not come up (CI=true): {exc}")
        pytest.skip(f"no Kubernetes control plane here: {exc}")
    yield cluster
    cluster.stop()


def finish_launches() -> None:
    """Wait for the launch pool's creates and report them, as the launch task does."""
    from jobs.compute import get_backend

    get_backend("kubernetes").finish_launches()


def platform_documents() -> list[dict]:
    """platform/k8s/ in the kustomization's order, as `kubectl apply -k` would send it."""
    kustomization = yaml.safe_load((PLATFORM / "kustomization.yaml").read_text())
    return [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((PLATFORM / name).read_text())
        if doc
    ]


def server_side_apply(api_client, documents, manager="gantry-tests"):
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api_client)
    applied = []
    for doc in documents:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        applied.append(
            dynamic.server_side_apply(
                resource, body=doc, field_manager=manager, force_conflicts=True
            )
        )
    return applied


@pytest.fixture(scope="session")
def gantry_kubeconfig(kube) -> str:
    """platform/k8s/ applied (server-side apply, as the admin would), and a kubeconfig
    with a token of its ServiceAccount `gantry`: what Gantry runs as in every test."""
    from kubernetes import client

    server_side_apply(kube.client(), platform_documents())
    core = client.CoreV1Api(kube.client())
    deadline = time.monotonic() + WAIT
    while True:  # the ServiceAccount token controller is not involved: TokenRequest
        try:
            token = core.create_namespaced_service_account_token(
                "gantry", "gantry", {"spec": {"expirationSeconds": 86400}}
            ).status.token
            break
        except client.exceptions.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return yaml.safe_dump(kube.kubeconfig_dict(token, user="system:serviceaccount:gantry:gantry"))


class Admin:
    """The cluster's admin: plays kubelets' and operators' parts, reads what Gantry made."""

    def __init__(self, kube):
        from kubernetes import client

        api = kube.client()
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)

    def pods(self, job, attempt=None):
        selector = f"{m.LABEL_JOB}={job.pk},{m.LABEL_ATTEMPT}={attempt or job.attempt}"
        ns = m.namespace_name(job.project.tenant.slug)
        pods = self.core.list_namespaced_pod(ns, label_selector=selector).items
        return sorted(pods, key=lambda p: p.metadata.name)

    def exit(self, pod, code: int = 0) -> None:
        """The pod's command ends with `code` (kwok's pod-exit stage acts on it)."""
        self.core.patch_namespaced_pod(
            pod.metadata.name,
            pod.metadata.namespace,
            {"metadata": {"annotations": {EXIT: str(code)}}},
        )

    def job_token(self, job, rank: int) -> str:
        """The rank's executor token, as the pod's Secret mount holds it."""
        name = m.token_secret_name(
            m.JobSpec(id=job.pk, attempt=job.attempt, kind="", tenant_slug="")
        )
        secret = self.core.read_namespaced_secret(name, m.namespace_name(job.project.tenant.slug))
        return base64.b64decode(secret.data[str(rank)]).decode()


class Gantry:
    """Gantry's side: its backend on the cluster as ServiceAccount gantry, its watches
    pumped in this thread, its executor API on a live server."""

    def __init__(self, admin: Admin, url: str):
        from jobs.compute import get_backend
        from jobs.compute.kubernetes.watch import watches_for

        self.admin = admin
        self.url = url
        self.backend = get_backend("kubernetes")
        self.ref = self.backend.default_cluster()
        self.watches = watches_for(self.backend, self.ref)
        for watch in self.watches:
            watch.timeout_seconds = 1
        self.failures: list[str] = []

    def pump(self, until, what: str, timeout: float = WAIT, reconcile=None):
        """Run the pod and Job watches until `until()` is true, as `manage.py k8s_watch`
        does (a watch that fails is started again); with `reconcile` (a job), also the
        reconcile task's look at it."""
        from jobs.services.lifecycle import reconcile_job

        deadline = time.monotonic() + timeout
        while True:
            for watch in self.watches:
                try:
                    watch.watch_once()
                except Exception as exc:  # the API server away: ResourceWatch.run retries
                    self.failures.append(repr(exc))
                    time.sleep(0.5)
            if reconcile is not None:
                reconcile.refresh_from_db()
                if not reconcile.is_terminal:
                    reconcile_job(reconcile)
            result = until()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached within {timeout} s: {what}")

    def submit(self, owner, project, **spec):
        from jobs.services.launch import launch_job
        from jobs.services.submit import submit_job
        from scheduling.admission import admission_pass

        spec.setdefault("command", "python train.py")
        job = submit_job(owner, project, **spec)
        assert job.state == "queued"
        admission_pass()
        job.refresh_from_db()
        assert job.state == "admitted", job.state_reason
        assert launch_job(job), job.state_reason
        finish_launches()
        job.refresh_from_db()
        assert job.state == "starting", job.state_reason
        return job

    def relaunch(self, job):
        """The admission and launch tasks take a retried job's next attempt."""
        from jobs.services.launch import launch_job
        from scheduling.admission import admission_pass

        job.refresh_from_db()
        assert job.state == "queued", job.state_reason
        admission_pass()
        job.refresh_from_db()
        assert launch_job(job), job.state_reason
        finish_launches()
        job.refresh_from_db()
        return job

    def running(self, job, ranks=(0,)):
        """Its pods Running and its executors started: the job runs."""
        pods = self.pump(
            lambda: (
                (p := self.admin.pods(job))
                and len(p) == len(ranks)
                and all(x.status.phase == "Running" for x in p)
                and p
            ),
            "pods Running",
        )
        for rank in ranks:
            self.executor(job, rank)
        job.refresh_from_db()
        assert job.state == "running", job.state_reason
        return pods

    def ended(self, job, **kw):
        return self.pump(lambda: (job.refresh_from_db(), job.is_terminal)[1], "job ends", **kw)

    def executor(self, job, rank: int, event: str = "started", **body):
        """What the executor in the pod sends first: GET its spec, POST `started`."""
        auth = {"Authorization": f"Bearer {self.admin.job_token(job, rank)}"}
        base = f"{self.url}/api/v1/executor/jobs/{job.pk}"
        spec = requests.get(f"{base}/spec", headers=auth, timeout=30)
        assert spec.status_code == 200, spec.text
        sent = requests.post(
            f"{base}/status",
            json={"worker": rank, "event": event, "pid": 7, **body},
            headers=auth,
            timeout=30,
        )
        assert sent.status_code == 200, sent.text
        return spec.json()

    def states(self, job) -> list[str]:
        return [e.to_state for e in job.events.order_by("at", "pk")]


@pytest.fixture
def admin(kube):
    return Admin(kube)


@pytest.fixture
def gantry(transactional_db, settings, kube, gantry_kubeconfig, live_server, admin, tmp_path):
    from cluster.models import KubernetesCluster
    from jobs.compute import reset_backends

    settings.GANTRY_JOB_BACKEND = "kubernetes"
    settings.GANTRY_URL = live_server.url
    settings.GANTRY_K8S_API_URL = live_server.url
    settings.GANTRY_K8S_DEFAULT_IMAGE = "registry.example.org/gantry/pytorch:2.5"
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    settings.GANTRY_JOB_GRACE_SECONDS = 2
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "files"},
        },
    }
    KubernetesCluster.objects.create(name="kwok", kubeconfig=gantry_kubeconfig, is_default=True)
    reset_backends()
    yield Gantry(admin, live_server.url)
    reset_backends()


@pytest.fixture
def tenant_project(gantry, owner, admin, request):
    """A tenant of its own per test (its namespace is deleted afterwards, and waited for,
    so no pod of this test reaches the next one's watches)."""
    from accounts import services as account_services
    from projects import services as project_services

    slug = "t-" + request.node.name.replace("_", "-")[5:40].strip("-")
    tenant = account_services.create_tenant(actor=owner, name=slug, slug=slug)
    project = project_services.create_project(actor=owner, tenant=tenant, name="P", slug="p")
    yield tenant, project
    from kubernetes.client.exceptions import ApiException

    ns = m.namespace_name(slug)
    with contextlib.suppress(ApiException):
        admin.core.delete_namespace(ns)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            admin.core.read_namespace(ns)
        except ApiException:
            break
        time.sleep(0.5)


# --- 1. everything Gantry sends is accepted; platform/k8s applies -------------------------


def test_platform_applies_server_side_and_its_objects_exist(kube, gantry_kubeconfig, admin):
    docs = platform_documents()
    # A second apply of the same manifests is accepted and changes nothing.
    before = admin.apps.read_namespaced_deployment("gantry-web", "gantry").metadata
    server_side_apply(kube.client(), docs)
    after = admin.apps.read_namespaced_deployment("gantry-web", "gantry").metadata
    assert after.generation == before.generation
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(kube.client())
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        meta = doc["metadata"]
        found = resource.get(name=meta["name"], namespace=meta.get("namespace"))
        assert found.metadata.name == meta["name"]
        # Server-side apply recorded who manages it.
        assert "gantry-tests" in {f.manager for f in found.metadata.managedFields}
    # The Deployment controller made their ReplicaSets (kwok runs their pods).
    web = admin.apps.read_namespaced_deployment("gantry-web", "gantry")
    assert web.spec.replicas == 2
    assert admin.apps.list_namespaced_replica_set("gantry").items


def test_every_generated_object_is_accepted_with_quota_and_limits_on(
    gantry, tenant_project, monkeypatch
):
    """Every job kind and option from the golden cases, created for real as Gantry's
    ServiceAccount (server-side dry run: validation, defaulting and every admission
    plugin, ResourceQuota and LimitRanger included), in a namespace Gantry set up."""
    from kubernetes.utils import parse_quantity

    from jobs.compute.kubernetes.client import create_any

    from .test_k8s_manifests import CASES, tokens

    tenant, _ = tenant_project
    conn = gantry.backend.connection(gantry.ref)
    from scheduling.models import TenantQuota

    TenantQuota.objects.create(tenant=tenant, guaranteed_gpus=16, max_cpus=64, max_memory_mb=65536)
    ns = gantry.backend.ensure_tenant(conn, tenant)
    quota = gantry.admin.core.read_namespaced_resource_quota("gantry-quota", ns)
    # Counted by the quota controller before Gantry goes on (else pods are refused).
    assert {k: parse_quantity(v) for k, v in quota.status.hard.items()} == {
        "requests.nvidia.com/gpu": 16,
        "requests.cpu": 64,
        "requests.memory": 65536 * 2**20,
    }
    created = 0
    for case, (spec, cfg) in CASES.items():
        spec = m.JobSpec(**{**spec.__dict__, "tenant_slug": tenant.slug})
        for manifest in m.job_manifests(spec, cfg, tokens(spec.workers)):
            made = create_any(conn, manifest, dry_run="All")
            assert made.metadata.name == manifest["metadata"]["name"], case
            created += 1
    assert created == 30  # 11 cases: Secrets, Services, gang policies, Jobs, Pods
    # Applying the tenant again (quota changed) updates in place, once the backend's
    # check window (TENANT_CHECK_SECONDS) has passed.
    from jobs.compute.kubernetes import backend as kubernetes

    monkeypatch.setattr(kubernetes, "TENANT_CHECK_SECONDS", 0)
    TenantQuota.objects.filter(tenant=tenant).update(guaranteed_gpus=4)
    gantry.backend.ensure_tenant(conn, tenant)
    quota = gantry.admin.core.read_namespaced_resource_quota("gantry-quota", ns)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "4"
    policies = {
        p.metadata.name for p in gantry.admin.networking.list_namespaced_network_policy(ns).items
    }
    assert policies == {"gantry-jobs", "gantry-notebooks"}


def test_the_tenant_namespace_enforces_pod_security_restricted(gantry, tenant_project, admin):
    """The API server's PodSecurity admission, not Gantry, keeps the tenant's namespace
    at "restricted": a pod asking for root and capabilities is refused whoever sends it (here
    the cluster admin), a pod made the way Gantry makes them is admitted, and a namespace
    made before the label existed gets it on the next apply."""
    from kubernetes.client.exceptions import ApiException

    from jobs.compute.kubernetes.client import create_any

    from .test_k8s_manifests import CASES, tokens

    tenant, _ = tenant_project
    conn = gantry.backend.connection(gantry.ref)
    ns = gantry.backend.ensure_tenant(conn, tenant)
    labels = admin.core.read_namespace(ns).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    privileged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "wants-root", "namespace": ns},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example.org/anything:1",
                    # (privileged: true the API server's --allow-privileged=false already
                    # refuses, before admission)
                    "securityContext": {
                        "runAsUser": 0,
                        "allowPrivilegeEscalation": True,
                        "capabilities": {"add": ["SYS_ADMIN"]},
                    },
                }
            ]
        },
    }
    with pytest.raises(ApiException) as refused:
        admin.core.create_namespaced_pod(ns, privileged, dry_run="All")
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "SYS_ADMIN" in message and "runAsNonRoot" in message
    spec, cfg = CASES["train-cpu"]
    spec = m.JobSpec(**{**spec.__dict__, "tenant_slug": tenant.slug})
    for manifest in m.job_manifests(spec, cfg, tokens(spec.workers)):
        create_any(conn, manifest, dry_run="All")  # admitted: raises otherwise

    # A namespace from before (no Pod Security label) is labelled on the next apply.
    admin.core.patch_namespace(
        ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": None}}}
    )
    gantry.backend._tenants.clear()  # what it applied and when: forgotten, so it applies now
    gantry.backend._tenants_checked.clear()
    gantry.backend.ensure_tenant(conn, tenant)
    labels = admin.core.read_namespace(ns).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


# --- 2. Gantry runs as its ServiceAccount, and no more -------------------------------------


def test_gantry_runs_as_its_service_account_and_is_refused_outside_its_role(gantry):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    conn = gantry.backend.connection(gantry.ref)
    review = client.AuthenticationV1Api(conn.api).create_self_subject_review({})
    assert review.status.user_info.username == "system:serviceaccount:gantry:gantry"
    # What it needs: nodes (capacity), pods and Jobs in every namespace (its watches).
    assert gantry.backend.node_details()
    conn.core.list_pod_for_all_namespaces(limit=1)
    conn.batch.list_job_for_all_namespaces(limit=1)
    # What it must not do: read Secrets (not even its jobs' tokens), grant itself roles.
    # (It may exec into pods: the job terminal, tests/jobs/test_k8s_real_node.py.)
    for forbidden in (
        lambda: conn.core.list_secret_for_all_namespaces(limit=1),
        lambda: conn.core.read_namespaced_secret("gantry-secrets", "gantry"),
        lambda: client.RbacAuthorizationV1Api(conn.api).create_cluster_role_binding(
            {
                "metadata": {"name": "gantry-escalates"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "gantry", "namespace": "gantry"}],
            }
        ),
        lambda: conn.core.delete_collection_node(),
    ):
        with pytest.raises(ApiException) as refused:
            forbidden()
        assert refused.value.status == 403


# --- 3. jobs go queued -> running -> succeeded through kwok's pods -------------------------


def test_train_job_runs_on_a_gpu_node_and_succeeds(gantry, admin, tenant_project, owner):
    _, project = tenant_project
    job = gantry.submit(owner, project, gpus=2, cpus=4, memory_mb=8192)
    pod = gantry.pump(
        lambda: [p for p in admin.pods(job) if p.status.phase == "Running"], "pod Running"
    )[0]
    assert pod.spec.node_name.startswith("gpu-")
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    assert pod.spec.security_context.run_as_non_root is True
    job.refresh_from_db()
    assert job.state == "starting"  # a running container is not yet a running command
    assert job.placement["hosts"] == {"0": pod.spec.node_name}  # where the scheduler put it
    spec = gantry.executor(job, 0)
    assert spec["command"] == ["python", "train.py"]
    job.refresh_from_db()
    assert job.state == "running"
    admin.exit(pod, 0)
    gantry.pump(lambda: (job.refresh_from_db(), job.is_terminal)[1], "job ends")
    assert job.state == "succeeded", job.state_reason
    assert gantry.states(job) == ["queued", "admitted", "starting", "running", "succeeded"]


def test_a_cpu_job_in_a_tenant_with_a_gpu_quota_asks_for_no_gpu(
    gantry, admin, tenant_project, owner
):
    """The namespace's LimitRange caps a container's GPUs at the tenant's quota; with no
    default of its own the API server would default every container's GPUs to that cap,
    so a CPU job would ask for all of the tenant's GPUs (and be refused by the quota, or
    hold them)."""
    from scheduling.models import TenantQuota

    tenant, project = tenant_project
    TenantQuota.objects.create(tenant=tenant, guaranteed_gpus=2)
    job = gantry.submit(owner, project, cpus=1)
    pod = gantry.pump(
        lambda: [p for p in admin.pods(job) if p.status.phase == "Running"], "pod Running"
    )[0]
    (container,) = pod.spec.containers
    for amounts in (container.resources.limits, container.resources.requests):
        assert amounts.get("nvidia.com/gpu", "0") == "0", amounts
    # A second one runs beside it: neither holds the tenant's 2 GPUs.
    other = gantry.submit(owner, project, name="other", cpus=1)
    gantry.pump(
        lambda: [p for p in admin.pods(other) if p.status.phase == "Running"], "other Running"
    )


def test_two_worker_distributed_job_gets_indexed_pods_and_succeeds(
    gantry, admin, tenant_project, owner
):
    _, project = tenant_project
    job = gantry.submit(owner, project, kind="distributed", workers=2, gpus=1, cpus=2)
    pods = gantry.pump(
        lambda: (
            (p := admin.pods(job))
            and len(p) == 2
            and all(x.status.phase == "Running" for x in p)
            and p
        ),
        "both workers Running",
    )
    ns = m.namespace_name(job.project.tenant.slug)
    name = m.workload_name(job.pk, job.attempt)
    assert admin.core.read_namespaced_service(name, ns).spec.cluster_ip == "None"
    gang = admin.networking.read_namespaced_network_policy(name, ns)
    assert gang.metadata.owner_references[0].kind == "Job"
    for index, pod in enumerate(
        sorted(pods, key=lambda p: int(p.metadata.annotations[m.INDEX_ANNOTATION]))
    ):
        assert pod.metadata.annotations[m.INDEX_ANNOTATION] == str(index)
        assert pod.spec.hostname == f"{name}-{index}" and pod.spec.subdomain == name
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["PET_NNODES"].value == "2"
        assert env["PET_MASTER_ADDR"].value == f"{name}-0.{name}"
        assert env["PET_NODE_RANK"].value_from.field_ref.field_path == (
            f"metadata.annotations['{m.INDEX_ANNOTATION}']"
        )
    job.refresh_from_db()
    assert set(job.placement["hosts"]) == {"0", "1"}
    gantry.executor(job, 0)
    job.refresh_from_db()
    assert job.state == "starting"  # a gang runs when all of it does
    gantry.executor(job, 1)
    job.refresh_from_db()
    assert job.state == "running"
    for pod in pods:
        admin.exit(pod, 0)
    gantry.pump(lambda: (job.refresh_from_db(), job.is_terminal)[1], "job ends")
    assert job.state == "succeeded", job.state_reason
    assert gantry.states(job) == ["queued", "admitted", "starting", "running", "succeeded"]
    k8s_job = admin.batch.read_namespaced_job(name, ns)
    assert k8s_job.status.succeeded == 2


def test_notebook_runs_as_a_pod_with_its_service_and_ends(gantry, admin, tenant_project, owner):
    _, project = tenant_project
    job = gantry.submit(owner, project, kind="notebook", gpus=1)
    pod = gantry.pump(
        lambda: [p for p in admin.pods(job) if p.status.phase == "Running"], "pod Running"
    )[0]
    ns = m.namespace_name(job.project.tenant.slug)
    name = m.workload_name(job.pk, job.attempt)
    service = admin.core.read_namespaced_service(name, ns)
    assert service.metadata.owner_references[0].kind == "Pod"
    assert pod.spec.containers[0].ports[0].container_port == 8888
    gantry.executor(job, 0)
    job.refresh_from_db()
    assert job.state == "running"
    worker = job.worker_set.get()
    assert worker.host == f"{name}.{ns}.svc"  # reached through the Service, by the proxy only
    admin.exit(pod, 0)  # JupyterLab shut down from its menu
    gantry.pump(lambda: (job.refresh_from_db(), job.is_terminal)[1], "job ends")
    assert job.state == "succeeded", job.state_reason
    assert gantry.states(job) == ["queued", "admitted", "starting", "running", "succeeded"]


def test_an_image_that_cannot_be_pulled_fails_the_job_with_the_reason(
    gantry, admin, tenant_project, owner, settings
):
    settings.GANTRY_K8S_DEFAULT_IMAGE = UNPULLABLE
    _, project = tenant_project
    job = gantry.submit(owner, project)
    gantry.pump(lambda: (job.refresh_from_db(), job.is_terminal)[1], "job ends")
    assert job.state == "failed"
    assert f"the image {UNPULLABLE} cannot be pulled" in job.state_reason
    assert "ImagePullBackOff" in job.state_reason or "Back-off pulling" in job.state_reason
    gantry.pump(lambda: not admin.pods(job), "pods gone")


# --- 4. quota and limits ----------------------------------------------------------------


def blocker_pod(ns: str, gpus: int) -> dict:
    """A pod Gantry did not make (`kubectl run` in the tenant's namespace), with what the
    namespace's Pod Security level ("restricted") asks of any pod there."""
    amounts = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    secure = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "outside-gantry", "namespace": ns},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": amounts},
                    "securityContext": secure,
                }
            ]
        },
    }


def test_a_quota_refusal_shows_the_real_message_and_the_job_runs_once_it_frees(
    gantry, admin, tenant_project, owner
):
    from scheduling.models import TenantQuota

    tenant, project = tenant_project
    TenantQuota.objects.create(tenant=tenant, guaranteed_gpus=2)
    ns = gantry.backend.ensure_tenant(gantry.backend.connection(gantry.ref), tenant)
    # Someone's own pod holds the namespace quota's 2 GPUs; Gantry's admission does not
    # know it, so it admits a 1-GPU job, and the cluster refuses its pod.
    admin.core.create_namespaced_pod(ns, blocker_pod(ns, 2))
    job = gantry.submit(owner, project, gpus=1)
    gantry.pump(
        lambda: (job.refresh_from_db(), "exceeded quota" in job.state_reason)[1],
        "the quota refusal shown",
        reconcile=job,
    )
    assert job.state == "starting"
    assert job.state_reason.startswith(
        "waiting: the cluster refuses to create its pods, the namespace's ResourceQuota is used up"
    )
    assert "exceeded quota: gantry-quota" in job.state_reason
    assert "requested: requests.nvidia.com/gpu=1" in job.state_reason
    assert "limited: requests.nvidia.com/gpu=2" in job.state_reason
    event = admin.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={m.workload_name(job.pk, 1)},reason=FailedCreate"
    ).items[0]
    assert "exceeded quota" in event.message  # the Job controller's own words
    # Capacity frees: the Job controller's next try creates the pod, and the job runs.
    admin.core.delete_namespaced_pod("outside-gantry", ns)
    (pod,) = gantry.running(job)
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    admin.exit(pod, 0)
    gantry.ended(job)
    assert job.state == "succeeded", job.state_reason


def test_a_limitrange_violation_fails_the_attempt_at_once(gantry, admin, tenant_project, owner):
    tenant, project = tenant_project
    ns = gantry.backend.ensure_tenant(gantry.backend.connection(gantry.ref), tenant)
    # The cluster's operator caps containers at 4 GiB in this namespace.
    admin.core.create_namespaced_limit_range(
        ns,
        {
            "metadata": {"name": "site-limits"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "4Gi"}}]},
        },
    )
    job = gantry.submit(owner, project, memory_mb=8192)
    gantry.ended(job)
    assert job.state == "failed"
    assert "the cluster refused to create its pods: they break the namespace's LimitRange" in (
        job.state_reason
    )
    assert "maximum memory usage per Container is 4Gi, but limit is 8Gi" in job.state_reason
    assert gantry.states(job) == ["queued", "admitted", "starting", "failed"]
    gantry.pump(lambda: not admin.batch.list_namespaced_job(ns).items, "the refused Job deleted")


# --- 5. disruption and cancel ------------------------------------------------------------


def test_an_evicted_pod_ends_the_attempt_as_lost_and_the_job_is_retried(
    gantry, admin, tenant_project, owner
):
    _, project = tenant_project
    job = gantry.submit(owner, project, gpus=1, max_retries=1)
    (pod,) = gantry.running(job)
    admin.core.create_namespaced_pod_eviction(
        pod.metadata.name,
        pod.metadata.namespace,
        {"metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace}},
    )
    gantry.pump(lambda: (job.refresh_from_db(), job.attempt == 2)[1], "a second attempt")
    assert job.state == "queued"
    assert job.state_reason.startswith(
        "attempt 1 lost (stopped by the cluster (EvictionByEvictionAPI"
    )
    assert job.state_reason.endswith("retrying, 2 of 2")
    gantry.relaunch(job)
    (pod,) = gantry.running(job)
    assert pod.metadata.labels[m.LABEL_ATTEMPT] == "2"
    admin.exit(pod, 0)
    gantry.ended(job)
    assert job.state == "succeeded", job.state_reason
    assert gantry.states(job) == [
        "queued", "admitted", "starting", "running", "queued",
        "admitted", "starting", "running", "succeeded",
    ]  # fmt: skip


def test_a_node_deleted_under_a_running_job_loses_the_attempt_and_it_is_retried(
    gantry, admin, tenant_project, owner, kube
):
    _, project = tenant_project
    job = gantry.submit(owner, project, gpus=8, max_retries=1)
    (pod,) = gantry.running(job)
    node = pod.spec.node_name
    try:
        admin.core.delete_node(node)
        # The pod garbage collector ends pods bound to a node that is gone (after its
        # quarantine of about 40 s), as Failed with a DisruptionTarget condition.
        gantry.pump(
            lambda: (job.refresh_from_db(), job.attempt == 2)[1], "a second attempt", timeout=240
        )
    finally:
        kube.add_nodes()
    assert job.state == "queued"
    assert job.state_reason.startswith("attempt 1 lost (stopped by the cluster (DeletionByPodGC")
    gantry.relaunch(job)
    (pod,) = gantry.running(job)
    admin.exit(pod, 0)
    gantry.ended(job)
    assert job.state == "succeeded", job.state_reason


def test_cancel_deletes_everything_with_foreground_propagation(
    gantry, admin, tenant_project, owner
):
    from kubernetes.client.exceptions import ApiException

    from jobs.services.lifecycle import cancel_job

    _, project = tenant_project
    job = gantry.submit(owner, project, kind="distributed", workers=2, gpus=1)
    gantry.running(job, ranks=(0, 1))
    ns = m.namespace_name(job.project.tenant.slug)
    name = m.workload_name(job.pk, 1)
    cancel_job(owner, job)
    with contextlib.suppress(ApiException):  # or already gone
        deleting = admin.batch.read_namespaced_job(name, ns)
        assert deleting.metadata.deletion_timestamp is not None
        assert "foregroundDeletion" in deleting.metadata.finalizers
    gantry.ended(job, reconcile=job)
    assert job.state == "cancelled", job.state_reason

    def gone(read) -> bool:
        try:
            read()
        except ApiException as exc:
            return exc.status == 404
        return False

    gantry.pump(
        lambda: (
            gone(lambda: admin.batch.read_namespaced_job(name, ns))
            and not admin.pods(job)
            and gone(lambda: admin.core.read_namespaced_service(name, ns))
            and gone(lambda: admin.core.read_namespaced_secret(f"{name}-token", ns))
            and gone(lambda: admin.networking.read_namespaced_network_policy(name, ns))
        ),
        "the Job, its pods, Service, Secret and gang policy deleted",
    )


# --- 6. resilience -------------------------------------------------------------------------


def test_watches_survive_an_api_server_restart_and_lose_nothing(
    gantry, admin, tenant_project, owner, kube
):
    import threading

    _, project = tenant_project
    job = gantry.submit(owner, project)
    (pod,) = gantry.running(job)
    before = [w.relists for w in gantry.watches]
    pods_watch = gantry.watches[0]
    pods_watch.timeout_seconds = 60

    def restart_and_finish():
        time.sleep(1)  # the pod watch below is open by then
        kube.restart_apiserver()
        admin.exit(pod, 0)  # the pod ends while Gantry's watches are away

    thread = threading.Thread(target=restart_and_finish)
    thread.start()
    try:
        pods_watch.watch_once()  # ends with the API server
    except Exception as exc:
        gantry.failures.append(repr(exc))
    thread.join()
    pods_watch.timeout_seconds = 1
    gantry.ended(job)
    assert job.state == "succeeded", job.state_reason
    assert gantry.states(job) == ["queued", "admitted", "starting", "running", "succeeded"]
    # A restarted API server's watch cache starts afresh, so the watches' last
    # resourceVersions are too old for it: answered 410 Gone, they listed again (a watch
    # that could resume from its version would have; either way nothing is lost).
    assert [w.relists for w in gantry.watches] == [n + 1 for n in before]


def test_reconcile_alone_repairs_what_no_watch_saw(gantry, admin, tenant_project, owner):
    """No watch runs once the job runs (k8s_watch down): the reconcile task's look at the cluster still
    ends the job when its pod has ended, with the pod's own verdict."""
    from jobs.services.lifecycle import reconcile_job

    _, project = tenant_project
    job = gantry.submit(owner, project)
    (pod,) = gantry.running(job)
    admin.exit(pod, 3)  # the command failed
    deadline = time.monotonic() + WAIT
    while not job.is_terminal:
        assert time.monotonic() < deadline, "reconcile did not end the job"
        reconcile_job(job)
        job.refresh_from_db()
        time.sleep(0.2)
    assert job.state == "failed"
    assert job.state_reason == "exited with code 3"
