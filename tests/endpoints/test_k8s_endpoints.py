"""An endpoint on the Kubernetes backend, against the control plane the suite starts
(tests/k8s_cluster.py: kwok plays the kubelets, so pods become Ready by kwok's stages and
no container runs). Gantry acts as the ServiceAccount of platform/k8s/ (its RBAC), as in
tests/jobs/test_k8s_live.py, whose fixtures these are (tests/endpoints/conftest.py).

What is checked: the Deployment, Service, NetworkPolicy and token Secret that Gantry
applies in the tenant's namespace, with the job pods' security settings and the
endpoint's replicas; the Deployment's status on the endpoint page; idle -> `replicas: 0`
and the first request -> the endpoint's replicas again; an alias move -> the new
version's Deployment, the old one deleted; a delete -> nothing left; a cluster's
refusal -> a readable reason and no half-written rows.

The network rule: tests contact 127.0.0.1 only. The gateway's forward to the Service
(`http://ep-<id>-v<n>.<namespace>.svc:80`) goes to httpx.MockTransport here, never to a
cluster address (kwok's pods are not real); tests/endpoints/test_k8s_gateway.py checks
the URL it would call, and tests/jobs/test_k8s_real_node.py a real pod's answer.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import time
from datetime import timedelta

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from accounts.models import ApiToken, TokenScope
from core.models import AuditEvent
from endpoints import gateway, k8s, rollout, services, traffic
from endpoints import kubernetes as ek
from endpoints.local import ReplicaError
from endpoints.models import Endpoint, EndpointState
from jobs.compute.kubernetes import manifests as m
from modelhub import services as hub
from tests.endpoints.builders import MLMODEL, torchscript_archive

pytestmark = [pytest.mark.k8s_live, pytest.mark.slow]

WAIT = 120  # a safety net against hanging, never a timing assertion


def upload(owner, model):
    return hub.upload_version(
        owner,
        model,
        [
            ("MLmodel", SimpleUploadedFile("MLmodel", MLMODEL)),
            ("model.pkl", SimpleUploadedFile("model.pkl", b"not loaded: kwok runs no container")),
        ],
    )


@pytest.fixture
def served(tenant_project, owner):
    """A model with two versions and the alias `champion` on v1, in a tenant of its own."""
    tenant, project = tenant_project
    model = hub.create_model(owner, project, name="digits")
    v1, v2 = upload(owner, model), upload(owner, model)
    hub.set_alias(owner, model, "champion", v1.number)
    return project, model, v1, v2


def make_endpoint(owner, served, **fields) -> Endpoint:
    project, model, _, _ = served
    fields.setdefault("alias", "champion")
    endpoint = services.create_endpoint(owner, project, name="digits", model=model, **fields)
    assert endpoint.backend == "kubernetes"
    return fresh(endpoint)


def fresh(endpoint) -> Endpoint:
    return Endpoint.objects.select_related(
        "project__tenant", "model", "version", "serving_version", "canary_serving_version"
    ).get(pk=endpoint.pk)


def namespace(endpoint) -> str:
    return m.namespace_name(endpoint.project.tenant.slug)


def deployment(admin, endpoint, number):
    from kubernetes.client.exceptions import ApiException

    try:
        return admin.apps.read_namespaced_deployment(
            ek.version_object_name(endpoint.pk, number), namespace(endpoint)
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def until(check, what: str):
    deadline = time.monotonic() + WAIT
    while not (found := check()):
        assert time.monotonic() < deadline, f"not reached within {WAIT} s: {what}"
        time.sleep(0.25)
    return found


def endpoint_objects(admin, endpoint) -> dict[str, list[str]]:
    ns, selector = namespace(endpoint), f"{ek.LABEL_ENDPOINT}={endpoint.pk}"
    return {
        kind: sorted(i.metadata.name for i in listing(ns, label_selector=selector).items)
        for kind, listing in (
            ("Deployment", admin.apps.list_namespaced_deployment),
            ("Service", admin.core.list_namespaced_service),
            ("NetworkPolicy", admin.networking.list_namespaced_network_policy),
            ("Secret", admin.core.list_namespaced_secret),
        )
    }


def test_an_endpoint_runs_as_a_deployment_with_the_job_pods_security_settings(
    gantry, admin, served, owner
):
    project, model, v1, _ = served
    endpoint = make_endpoint(owner, served, replicas=2)

    route = rollout.route(endpoint)  # the gateway's first request: the cold start

    ns = namespace(endpoint)
    name = f"ep-{endpoint.pk}-v1"
    assert route.url == f"http://{name}.{ns}.svc:80" and route.replica is None
    assert route.version == v1 and route.cold_start_ms > 0
    endpoint = fresh(endpoint)
    assert endpoint.serving_version == v1 and endpoint.state == EndpointState.READY
    assert endpoint.last_cold_start_ms == pytest.approx(route.cold_start_ms)
    print(f"\ncold start on kwok (apply + first pod Ready): {route.cold_start_ms:.0f} ms")
    assert endpoint_objects(admin, endpoint) == {
        "Deployment": [name],
        "Service": [name],
        "NetworkPolicy": [name],
        "Secret": [f"ep-{endpoint.pk}-token"],
    }
    # The endpoint's replicas, all Ready by kwok's stages, and the page says so.
    until(lambda: (deployment(admin, endpoint, 1).status.ready_replicas or 0) == 2, "2 ready")
    assert deployment(admin, endpoint, 1).spec.replicas == 2
    assert rollout.live_status(endpoint) == (EndpointState.READY, "2/2 replicas ready")
    # Every pod with a job pod's security settings.
    job_pod = m.pod_spec(
        m.JobSpec(id=1, attempt=1, kind="train", tenant_slug="x"), k8s.manifest_config(gantry.ref)
    )  # the same settings endpoints.kubernetes takes from jobs' own manifest code
    pods = admin.core.list_namespaced_pod(ns, label_selector=f"{ek.LABEL_ENDPOINT}={endpoint.pk}")
    assert len(pods.items) == 2
    for pod in pods.items:
        security = pod.spec.security_context
        assert security.run_as_non_root is True
        assert security.run_as_user == job_pod["securityContext"]["runAsUser"]
        assert security.seccomp_profile.type == "RuntimeDefault"
        assert pod.spec.automount_service_account_token is False
        for container in pod.spec.init_containers + pod.spec.containers:
            assert container.security_context.capabilities.drop == ["ALL"]
            assert container.security_context.allow_privilege_escalation is False
            assert container.security_context.read_only_root_filesystem is True
    # Only Gantry's namespace may call the pods.
    cfg = k8s.manifest_config(gantry.ref)
    policy = admin.networking.api_client.sanitize_for_serialization(
        admin.networking.read_namespaced_network_policy(name, ns)
    )
    assert policy["spec"]["podSelector"]["matchLabels"] == ek.selector(k8s.spec_of(endpoint, v1, 2))
    assert policy["spec"]["ingress"][0]["from"] == [m.gantry_api_peer(cfg)]
    # The pods download the model with a read-only token limited to the project.
    secret = admin.core.read_namespaced_secret(f"ep-{endpoint.pk}-token", ns)
    key = base64.b64decode(secret.data["token"]).decode()
    token = ApiToken.objects.get(key_hash=hashlib.sha256(key.encode()).hexdigest())
    assert (token.scope, token.project, token.user, token.is_active) == (
        TokenScope.READ,
        project,
        owner,
        True,
    )
    # Applying again changes nothing (server-side apply) and makes no new token.
    generation = deployment(admin, endpoint, 1).metadata.generation
    k8s.apply_version(endpoint, v1, endpoint.replicas)
    assert deployment(admin, endpoint, 1).metadata.generation == generation
    assert ApiToken.objects.filter(name=token.name).count() == 1
    # New replicas asked for: the next request routed afresh applies them.
    services.update_endpoint(owner, endpoint, replicas=3)
    k8s.forget(endpoint.pk, 1)
    assert rollout.route(fresh(endpoint)).version == v1
    assert deployment(admin, endpoint, 1).spec.replicas == 3
    until(lambda: (deployment(admin, endpoint, 1).status.ready_replicas or 0) == 3, "3 ready")
    assert ApiToken.objects.filter(name=token.name).count() == 1


def test_idle_scales_to_zero_and_the_first_request_scales_back(
    gantry, admin, served, owner, monkeypatch
):
    endpoint = make_endpoint(owner, served, replicas=2, idle_seconds=60)
    rollout.route(endpoint)
    until(lambda: (deployment(admin, endpoint, 1).status.ready_replicas or 0) == 2, "2 ready")
    now = timezone.now()

    # Within its idle time nothing changes; past it the Deployment goes to zero.
    assert k8s.scale_idle(now=now + timedelta(seconds=30))["scaled_to_zero"] == 0
    assert deployment(admin, endpoint, 1).spec.replicas == 2
    assert k8s.scale_idle(now=now + timedelta(seconds=90))["scaled_to_zero"] == 1
    assert deployment(admin, endpoint, 1).spec.replicas == 0
    assert fresh(endpoint).state == EndpointState.SCALED_TO_ZERO
    ns, selector = namespace(endpoint), f"{ek.LABEL_ENDPOINT}={endpoint.pk}"
    until(lambda: not admin.core.list_namespaced_pod(ns, label_selector=selector).items, "no pod")
    assert rollout.live_status(fresh(endpoint)) == (EndpointState.SCALED_TO_ZERO, "scaled to zero")

    # The first request through the gateway scales it back and waits for a ready pod; the
    # forward to the Service goes to a stand-in (no cluster address is ever contacted).
    called = []

    def service(request: httpx.Request) -> httpx.Response:
        called.append((request.url.host, request.url.port or 80, request.url.path))
        return httpx.Response(200, json={"outputs": [{"name": "p", "data": [7]}]})

    monkeypatch.setattr(gateway, "SERVICE_TRANSPORT", httpx.MockTransport(service))
    monkeypatch.setattr(gateway, "_service_clients", type(gateway._service_clients)())
    monkeypatch.setattr(traffic, "FLUSH_SECONDS", 60.0)  # this test flushes, not a timer
    body = json.dumps({"inputs": [[0.0] * 64]}).encode()
    call = gateway.Call("POST", "invocations", body, "application/json")
    answer = asyncio.run(gateway.handle(lambda: fresh(endpoint), call))

    assert answer.status == 200, answer.content
    assert json.loads(answer.content) == {"predictions": [7]}
    assert called == [(f"ep-{endpoint.pk}-v1.{ns}.svc", 80, "/v2/models/digits/infer")]
    cold_ms = float(answer.headers["Gantry-Cold-Start-Ms"])
    print(f"\nscale back from zero on kwok (first request): {cold_ms:.0f} ms")
    assert deployment(admin, endpoint, 1).spec.replicas == 2
    until(lambda: (deployment(admin, endpoint, 1).status.ready_replicas or 0) == 2, "2 ready")
    assert fresh(endpoint).state == EndpointState.READY
    # The next call takes the quick path (seen ready: no query, no API call on the loop).
    again = asyncio.run(gateway.handle(lambda: fresh(endpoint), call))
    assert again.status == 200 and "Gantry-Cold-Start-Ms" not in again.headers
    assert called[1] == called[0]
    # The request is recorded: the idle time counts from it.
    traffic.flush()
    asked = fresh(endpoint).requests.order_by("at", "pk").last()
    assert [r.cold_start for r in fresh(endpoint).requests.order_by("at", "pk")] == [True, False]
    later = asked.at + timedelta(seconds=59)
    assert k8s.scale_idle(now=later)["scaled_to_zero"] == 0
    assert deployment(admin, endpoint, 1).spec.replicas == 2


def test_an_alias_move_applies_the_new_version_and_deletes_the_old(
    gantry, admin, served, owner, monkeypatch
):
    monkeypatch.setattr(rollout, "DRAIN_SECONDS", 0.1)
    project, model, v1, v2 = served
    endpoint = make_endpoint(owner, served, replicas=2)
    rollout.route(endpoint)
    assert endpoint_objects(admin, endpoint)["Deployment"] == [f"ep-{endpoint.pk}-v1"]
    first = ApiToken.objects.get(name=k8s.TOKEN_NAME.format(endpoint.pk))

    hub.set_alias(owner, model, "champion", v2.number)
    route = rollout.route(fresh(endpoint))
    # v1 answers while v2 starts in the background; the slot switches once v2's replicas
    # are all ready, and v1's objects go.
    assert route.version == v1
    until(lambda: fresh(endpoint).serving_version == v2, "the switch to v2")
    name = f"ep-{endpoint.pk}-v2"
    assert deployment(admin, endpoint, 2).status.ready_replicas == 2
    # (v1's Deployment, Service and NetworkPolicy are deleted one after the other.)
    left = {
        "Deployment": [name],
        "Service": [name],
        "NetworkPolicy": [name],
        "Secret": [f"ep-{endpoint.pk}-token"],
    }
    until(lambda: endpoint_objects(admin, endpoint) == left, "v1's objects deleted")
    route = rollout.route(fresh(endpoint))
    assert route.version == v2 and route.url.startswith(f"http://{name}.")
    # A new Deployment got a new token; the old one is revoked (the audit log says so) and
    # gone from the creator's token list, which holds one per endpoint, not one per roll.
    tokens = ApiToken.objects.filter(name=k8s.TOKEN_NAME.format(endpoint.pk))
    assert [(t.is_active, t.pk > first.pk) for t in tokens] == [(True, True)]
    revoked = AuditEvent.objects.filter(action="token.revoke", object_id=str(first.pk))
    assert revoked.count() == 1


def test_deleting_an_endpoint_deletes_its_objects_in_the_cluster(gantry, admin, served, owner):
    endpoint = make_endpoint(owner, served)
    rollout.route(endpoint)
    assert endpoint_objects(admin, endpoint)["Deployment"]

    services.delete_endpoint(owner, endpoint)

    empty = {"Deployment": [], "Service": [], "NetworkPolicy": [], "Secret": []}
    until(lambda: endpoint_objects(admin, endpoint) == empty, "every object deleted")
    assert not ApiToken.objects.filter(name=k8s.TOKEN_NAME.format(endpoint.pk)).exists()


def test_deleting_the_model_deletes_its_endpoints_objects_too(gantry, admin, served, owner):
    project, model, _, _ = served
    endpoint = make_endpoint(owner, served)
    rollout.route(endpoint)

    hub.delete_model(owner, model)  # the cascade: core.registry.before_cascade

    empty = {"Deployment": [], "Service": [], "NetworkPolicy": [], "Secret": []}
    until(lambda: endpoint_objects(admin, endpoint) == empty, "every object deleted")


def test_a_cluster_refusal_is_a_readable_reason_and_writes_no_half_rows(
    gantry, admin, served, owner, settings
):
    endpoint = make_endpoint(owner, served)
    ns = namespace(endpoint)
    gantry.backend.ensure_tenant(gantry.backend.connection(), endpoint.project.tenant)
    # Someone else's Deployment of that name, whose selector (immutable) is not Gantry's:
    # the API server refuses Gantry's apply.
    labels = {"app": "not-gantry"}
    admin.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": f"ep-{endpoint.pk}-v1"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "example.org/c:1"}]},
                },
            },
        },
    )

    with pytest.raises(ReplicaError) as refused:
        rollout.route(endpoint)

    message = str(refused.value)
    assert "answered HTTP 422" in message and "immutable" in message, message
    endpoint = fresh(endpoint)
    assert endpoint.state == EndpointState.FAILED
    assert "HTTP 422" in endpoint.state_reason and "immutable" in endpoint.state_reason
    assert endpoint.serving_version is None
    assert not ApiToken.objects.filter(name=k8s.TOKEN_NAME.format(endpoint.pk)).exists()

    # A cluster that does not answer at all (a closed port on loopback): said in words.
    from cluster.models import KubernetesCluster
    from jobs.compute import reset_backends

    row = KubernetesCluster.objects.get(name="kwok")
    config = __import__("yaml").safe_load(row.kubeconfig)
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    row.kubeconfig = json.dumps(config)
    row.save()
    reset_backends()
    rollout._failures.clear()
    with contextlib.suppress(Exception):
        admin.apps.delete_namespaced_deployment(f"ep-{endpoint.pk}-v1", ns)
    with pytest.raises(ReplicaError, match="does not answer"):
        rollout.route(endpoint)
    assert not ApiToken.objects.filter(name=k8s.TOKEN_NAME.format(endpoint.pk)).exists()
    assert "does not answer" in fresh(endpoint).state_reason


def test_replicas_on_kubernetes_count_in_the_quota_usage_and_cluster_page_as_asked(
    gantry, admin, served, owner, client
):
    from endpoints.models import ReplicaInterval
    from endpoints.usage import service_usage
    from scheduling.services import set_tenant_quota

    project, model, _, _ = served
    tenant = project.tenant
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=0, borrow_limit_gpus=0,
                     max_cpus=3)  # fmt: skip
    endpoint = make_endpoint(owner, served, replicas=2, cpus=1, idle_seconds=60)
    assert services.running_replica_counts().get(endpoint.pk) is None  # nothing runs yet

    rollout.route(endpoint)  # the Deployment applied with 2 replicas

    name = f"ep-{endpoint.pk}-v1"
    assert services.running_replica_counts()[endpoint.pk] == 2
    held = services.tenant_serving_holdings([tenant.pk])[tenant.pk]
    assert (held["cpus"], held["replicas"]) == (2, 2)
    # The tenant's other endpoint is refused: 2 CPUs held by this one, 2 more asked, 3 allowed.
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(
            owner, project, name="second", model=model, alias="champion", replicas=2, cpus=1
        )
    assert "holds 2 CPUs now (0 CPUs by jobs, 2 CPUs by other endpoints)" in str(refused.value)
    assert not Endpoint.objects.filter(name="second").exists()
    # The cluster page lists it with what it holds.
    client.force_login(owner)
    page = client.get("/cluster/")
    assert page.status_code == 200
    assert f"/{endpoint.name}</a></td><td>v1</td><td>Kubernetes</td>" in page.content.decode()
    # Usage reports count it from when it was applied.
    (interval,) = ReplicaInterval.objects.filter(endpoint=endpoint)
    assert (interval.replica, interval.replicas, interval.ended_at) == (name, 2, None)
    reported = service_usage(owner, None, [tenant], interval.started_at, timezone.now())
    assert [(u["id"][1], u["replicas"], u["end"]) for u in reported] == [(endpoint.name, 2, None)]

    # Scaled behind Gantry's back: the minute's pass counts what the cluster asks for.
    admin.apps.patch_namespaced_deployment(name, namespace(endpoint), {"spec": {"replicas": 1}})
    k8s.scale_idle(now=timezone.now())  # within its idle time: only squared
    intervals = ReplicaInterval.objects.filter(endpoint=endpoint).order_by("pk")
    assert [(i.replicas, i.ended_at is None) for i in intervals] == [(2, False), (1, True)]
    assert services.running_replica_counts()[endpoint.pk] == 1
    # Idle: scaled to zero, the interval closed, nothing held.
    assert k8s.scale_idle(now=timezone.now() + timedelta(seconds=90))["scaled_to_zero"] == 1
    assert not ReplicaInterval.objects.filter(endpoint=endpoint, ended_at=None).exists()
    assert services.running_replica_counts().get(endpoint.pk) is None
    assert services.tenant_serving_holdings([tenant.pk]) == {}
    # The first request scales it back (and counts again); deleting the endpoint ends it.
    rollout.route(fresh(endpoint))
    assert services.running_replica_counts()[endpoint.pk] == 2
    services.delete_endpoint(owner, fresh(endpoint))
    assert not ReplicaInterval.objects.filter(replica=name, ended_at=None).exists()
    assert ReplicaInterval.objects.filter(replica=name).count() == 3  # kept for usage reports


def test_a_deployment_deleted_behind_gantrys_back_stops_counting_at_the_next_pass(
    gantry, admin, served, owner
):
    from endpoints.models import ReplicaInterval

    endpoint = make_endpoint(owner, served, replicas=2)  # never idle: squared all the same
    rollout.route(endpoint)
    assert services.running_replica_counts()[endpoint.pk] == 2

    admin.apps.delete_namespaced_deployment(f"ep-{endpoint.pk}-v1", namespace(endpoint))
    k8s.scale_idle()

    assert services.running_replica_counts().get(endpoint.pk) is None
    assert ReplicaInterval.objects.get(endpoint=endpoint).ended_at is not None


def test_a_torchscript_version_runs_in_the_torchscript_image_with_its_runtime(
    gantry, admin, served, owner, settings
):
    project, model, _, _ = served
    archive = SimpleUploadedFile("net.torchscript.pt", torchscript_archive())
    scripted = hub.upload_version(owner, model, [("net.torchscript.pt", archive)])
    # Without an image that has PyTorch, refused in words, and no row written.
    settings.GANTRY_K8S_TORCH_IMAGE = ""
    with pytest.raises(ValidationError) as refused:
        make_endpoint(owner, served, alias="", version=scripted.number)
    assert "GANTRY_K8S_TORCH_IMAGE names none" in str(refused.value)
    assert not Endpoint.objects.exists()

    settings.GANTRY_K8S_TORCH_IMAGE = "registry.example/gantry/serving:torch"
    endpoint = make_endpoint(owner, served, alias="", version=scripted.number)
    rollout.route(endpoint)

    pod = deployment(admin, endpoint, scripted.number).spec.template.spec
    (init,) = pod.init_containers
    env = {e.name: e.value for e in init.env}
    assert env["IMPLEMENTATION"] == "gantry_runtime.CheckedTorchScriptModel"
    assert env["MODEL_FILE"].endswith("/net.torchscript.pt")
    assert {c.image for c in [init, *pod.containers]} == {settings.GANTRY_K8S_TORCH_IMAGE}


def test_a_gpu_endpoint_runs_its_replicas_on_gpu_nodes_and_counts_its_gpus(
    gantry, admin, served, owner
):
    """GPU replicas as the cluster schedules them: kwok's GPU nodes advertise
    nvidia.com/gpu as a device plugin would (tests/k8s_cluster.py; no GPU here, no
    device plugin runs), so what is proven is the request, the placement, the tolerations
    and Gantry's counting, not a GPU inside the container."""
    from endpoints.models import ReplicaInterval
    from scheduling.services import set_tenant_quota

    project, model, _, _ = served
    tenant = project.tenant
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=2, borrow_limit_gpus=0)
    endpoint = make_endpoint(owner, served, replicas=2, gpus=1)

    rollout.route(endpoint)

    ns, selector = namespace(endpoint), f"{ek.LABEL_ENDPOINT}={endpoint.pk}"

    def said() -> str:
        pods = admin.core.list_namespaced_pod(ns, label_selector=selector).items
        events = admin.core.list_namespaced_event(ns).items
        return "\n".join([*(f"{p.metadata.name} {p.status.phase} {p.spec.node_name}" for p in pods),
                          *(f"{e.involved_object.name} {e.reason}: {e.message}" for e in events)])

    until(lambda: (deployment(admin, endpoint, 1).status.ready_replicas or 0) == 2,
          f"2 ready {said()}")
    pods = admin.core.list_namespaced_pod(ns, label_selector=selector).items
    assert len(pods) == 2
    for pod in pods:
        (server,) = pod.spec.containers
        assert server.resources.limits["nvidia.com/gpu"] == "1"
        assert server.resources.requests["nvidia.com/gpu"] == "1"
        assert {t.key for t in pod.spec.tolerations or []} >= {"nvidia.com/gpu"}
        node = admin.core.read_node(pod.spec.node_name)
        assert node.metadata.labels.get("nvidia.com/gpu.present") == "true", pod.spec.node_name
    held = services.tenant_serving_holdings([tenant.pk])[tenant.pk]
    assert (held["gpus"], held["replicas"]) == (2, 2)
    (interval,) = ReplicaInterval.objects.filter(endpoint=endpoint)
    assert (interval.gpus, interval.replicas) == (1, 2)
    # The tenant's 2 GPUs are held: another GPU endpoint is refused, nothing written.
    with pytest.raises(ValidationError) as refused:
        services.create_endpoint(owner, project, name="more", model=model, alias="champion", gpus=1)
    assert "2 GPUs by other endpoints" in str(refused.value), refused.value
    assert not Endpoint.objects.filter(name="more").exists()
