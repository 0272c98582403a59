"""The gateway remembers who may call an endpoint for admissions.TTL seconds: a repeated
call skips the database, and a change made elsewhere (another web process) takes effect
within that bound. Calls go through the real ASGI application; the path asked for is
one the gateway refuses once the caller is admitted (404, "inference paths"), so no
model server is needed to tell an admitted call from a refused one."""

import asyncio
import time

import httpx
import pytest
from django.utils import timezone

from accounts import services as account_services
from config.asgi import application
from endpoints import admissions, gateway, services, traffic
from endpoints.models import Endpoint, EndpointToken
from tests.endpoints.builders import access_objects

pytestmark = pytest.mark.django_db(transaction=True)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    admissions.forget()
    fake = Clock()
    monkeypatch.setattr(admissions, "clock", fake)
    yield fake
    admissions.forget()


@pytest.fixture
def endpoint(project, owner):
    yield access_objects(project, owner)[Endpoint]
    traffic.flush()  # the refusals' log, while the database is there


def call(endpoint, secret, name=None):
    path = f"/serve/lab-a/vision/{name or endpoint.name}/v2/repository/models/x/unload"

    async def go():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.post(path, headers={"Authorization": f"Bearer {secret}"})

    return asyncio.run(go())


def admitted(answer) -> bool:
    return answer.status_code == 404 and "inference paths" in answer.json()["error"]


def test_a_repeated_call_is_admitted_without_asking_the_database(
    clock, endpoint, owner, monkeypatch
):
    asked = []
    authorize = gateway.authorize_secret
    monkeypatch.setattr(gateway, "authorize_secret", lambda *a: asked.append(a) or authorize(*a))
    _, secret = services.create_endpoint_token(owner, endpoint, "service")

    assert admitted(call(endpoint, secret))
    assert admitted(call(endpoint, secret))
    assert len(asked) == 1
    clock.now += admissions.TTL
    assert admitted(call(endpoint, secret))
    assert len(asked) == 2
    # What is remembered is this token for this endpoint: another path is asked afresh.
    assert call(endpoint, secret, name="other").json()["error"] == "No such endpoint."


def test_calls_that_miss_together_read_the_database_once(clock, endpoint, owner, monkeypatch):
    asked = []
    authorize = gateway.authorize_secret

    def slow_authorize(*args):
        asked.append(args)
        time.sleep(0.2)  # the other calls arrive while this one reads
        return authorize(*args)

    monkeypatch.setattr(gateway, "authorize_secret", slow_authorize)
    _, secret = services.create_endpoint_token(owner, endpoint, "service")

    async def together():
        transport = httpx.ASGITransport(app=application)
        path = "/serve/lab-a/vision/served/v2/repository/models/x/unload"
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await asyncio.gather(
                *(
                    client.post(path, headers={"Authorization": f"Bearer {secret}"})
                    for _ in range(8)
                )
            )

    assert all(admitted(answer) for answer in asyncio.run(together()))
    assert len(asked) == 1


def test_a_token_revoked_by_another_process_stops_working_within_the_bound(
    clock, endpoint, owner
):
    _, secret = services.create_endpoint_token(owner, endpoint, "service")
    assert admitted(call(endpoint, secret))
    # Another web process revokes it: this one does not hear of it...
    EndpointToken.objects.update(revoked_at=timezone.now())
    clock.now += admissions.TTL / 2
    assert admitted(call(endpoint, secret))  # ...and may still admit it, for at most TTL
    clock.now += admissions.TTL / 2
    assert call(endpoint, secret).status_code == 401


def test_a_token_revoked_in_this_process_stops_working_at_once(clock, endpoint, owner):
    token, secret = services.create_endpoint_token(owner, endpoint, "service")
    assert admitted(call(endpoint, secret))
    services.revoke_endpoint_token(owner, token)
    assert call(endpoint, secret).status_code == 401


def test_a_deleted_endpoint_stops_answering_within_the_bound(clock, endpoint, owner):
    api_secret = account_services.create_api_token(actor=owner, name="t", scope="write")[1]
    assert admitted(call(endpoint, api_secret))
    Endpoint.objects.filter(pk=endpoint.pk).delete_locked()  # by another process
    clock.now += admissions.TTL
    assert call(endpoint, api_secret).json()["error"] == "No such endpoint."


def test_a_member_removed_elsewhere_loses_the_endpoint_within_the_bound(
    clock, endpoint, member, tenant
):
    secret = account_services.create_api_token(actor=member, name="t", scope="write")[1]
    assert admitted(call(endpoint, secret))  # a tenant member views the project: may call
    tenant.memberships.filter(user=member).delete()
    clock.now += admissions.TTL
    assert call(endpoint, secret).json()["error"] == "No such endpoint."


def test_a_change_in_this_process_is_read_at_once(clock, endpoint, owner):
    secret = account_services.create_api_token(actor=owner, name="t", scope="write")[1]
    assert admitted(call(endpoint, secret))
    services.update_endpoint(owner, endpoint, rate_limit=7)
    assert admissions._entries == {}
