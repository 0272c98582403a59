"""The gateway's forward on the Kubernetes backend: to the served version's Service by its
cluster DNS name, `http://ep-<id>-v<n>.<namespace>.svc:80`.

Why httpx.MockTransport and no cluster: the network rule of the suite is that tests
contact 127.0.0.1 only, and the control plane the suite starts (kwok) runs no container,
so no pod behind a Service could answer anyway. These tests check the URL, method, body
and headers the gateway would send, and what it makes of the answer. The forward to a
real pod is tested on the real node (tests/jobs/test_k8s_real_node.py, where Gantry runs
on the cluster's network); the objects themselves against the control plane in
test_k8s_endpoints.py.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from endpoints import gateway, k8s, rollout
from tests.endpoints.builders import access_objects


@pytest.fixture
def endpoint(settings, project, owner):
    settings.GANTRY_JOB_BACKEND = "kubernetes"  # where new endpoints run
    made = next(iter(access_objects(project, owner).values()))
    assert made.backend == "kubernetes"
    return made


@pytest.fixture
def service(monkeypatch):
    """What the gateway sends, answered by a stand-in for the Service."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"outputs": [{"name": "p", "data": [3]}]})

    monkeypatch.setattr(gateway, "SERVICE_TRANSPORT", httpx.MockTransport(answer))
    monkeypatch.setattr(gateway, "_service_clients", type(gateway._service_clients)())
    return sent


def on_the_event_loop(function, *args):
    """`function(*args)` where the gateway's quick path runs: on a running event loop,
    where Django refuses a query (SynchronousOnlyOperation)."""

    async def run():
        return function(*args)

    return asyncio.run(run())


@pytest.mark.django_db
def test_a_seen_ready_version_is_routed_to_its_service_by_dns_name(endpoint, monkeypatch):
    version = endpoint.version
    endpoint.serving_version = version
    k8s.forget(endpoint.pk, version.number)
    # Not seen ready: the quick path leaves it to `route` (a worker thread asks the cluster).
    assert on_the_event_loop(rollout.quick_route, endpoint, version, None) is None

    monkeypatch.setattr(k8s, "replicas", lambda endpoint, number: (1, 1))  # as the cluster says
    assert k8s.up(endpoint, version)
    route = on_the_event_loop(rollout.quick_route, endpoint, version, None)

    namespace = f"gantry-{endpoint.project.tenant.slug}"
    assert route.url == f"http://ep-{endpoint.pk}-v{version.number}.{namespace}.svc:80"
    assert route.replica is None and route.version == version
    # A call that found it gone forgets it: the next is routed afresh (a cold start).
    rollout.after_failure(endpoint, route)
    assert on_the_event_loop(rollout.quick_route, endpoint, version, None) is None


@pytest.mark.django_db
def test_the_gateway_forwards_to_the_service_url_with_the_translated_body(endpoint, service):
    version = endpoint.version
    url = f"http://ep-{endpoint.pk}-v{version.number}.gantry-lab-a.svc:80"
    route = rollout.Route(version, None, canary=False, url=url)
    body = json.dumps({"inputs": [[0.5, 1.0]]}).encode()

    answer, used = asyncio.run(
        gateway._answer(
            endpoint, route, gateway.Call("POST", "invocations", body, "application/json"), True
        )
    )

    (request,) = service
    assert (request.method, request.url.host, request.url.port or 80) == (
        "POST",
        f"ep-{endpoint.pk}-v{version.number}.gantry-lab-a.svc",
        80,
    )
    assert request.url.path == f"/v2/models/{endpoint.name}/infer"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content)["inputs"][0]["shape"] == [1, 2]
    assert (answer.status, json.loads(answer.content)) == (200, {"predictions": [3]})
    assert answer.headers[gateway.VERSION_HEADER] == f"v{version.number}"
    assert used is route
