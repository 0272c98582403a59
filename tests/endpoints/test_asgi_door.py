"""The gateway's ASGI door (endpoints/asgi.py) answers bearer-token calls to /serve/ before
Django's middleware: what that middleware would have checked must still hold."""

import asyncio

import httpx
import pytest

from config.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def call(host: str) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            return await client.post(
                "/serve/lab/p/digits/v2/models/digits/infer",
                headers={"Authorization": "Bearer gep_not-a-real-token"},
                json={"inputs": []},
            )

    return asyncio.run(go())


def test_a_host_outside_allowed_hosts_is_refused_as_django_refuses_it():
    answer = call("evil.example")
    assert answer.status_code == 400  # Django's DisallowedHost, not the gateway's 401/404


def test_an_allowed_host_reaches_the_gateway():
    answer = call("localhost")
    assert answer.status_code == 401 and "token" in answer.text  # the gateway's own refusal
