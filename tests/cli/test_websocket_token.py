"""The live-log websocket signed in by an API token (`Authorization: Bearer gty_…` on the
handshake), as `gantry logs -f` opens it: the token's user, project and revocation count
exactly as on the API. Driven through `config.asgi.application` with channels'
WebsocketCommunicator (as tests/jobs/test_live.py drives the browser's sockets)."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator

from accounts import services as account_services
from config.asgi import application
from projects import services as project_services
from tests.jobs.test_live import lines, receive_until, running_job, seqs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.GANTRY_WS_RECHECK_SECONDS = 0
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


async def open_with_token(key, job, query="after=0"):
    headers = [(b"origin", b"http://testserver"), (b"authorization", f"Bearer {key}".encode())]
    communicator = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/?{query}", headers)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


def token(user, **extra):
    return account_services.create_api_token(actor=user, name="cli", scope="read", **extra)


def test_a_token_watches_its_users_job_from_a_sequence_number(owner, project):
    from jobs.services.ingestion import ingest_logs

    job = running_job(owner, project)
    ingest_logs(job, 0, lines(1, 5))
    _, key = token(owner)

    async def scenario():
        communicator = await open_with_token(key, job, "after=0:3")
        got = await receive_until(communicator, lambda m: m["type"] == "caught_up")
        assert seqs(got) == [4, 5]  # resumed after seq 3, nothing before it again
        # Live lines pass the access re-check (every message here): the token still works.
        await sync_to_async(ingest_logs)(job, 0, lines(6, 7))
        live = await receive_until(communicator, lambda m: m["type"] == "lines")
        assert seqs(live) == [6, 7]
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_an_outsiders_token_or_one_limited_to_another_project_gets_4404(
    owner, outsider, tenant, project
):
    job = running_job(owner, project)
    _, outsider_key = token(outsider)
    audio = project_services.create_project(actor=owner, tenant=tenant, name="Audio", slug="audio")
    _, limited_key = token(owner, project=audio)

    async def scenario():
        for key in (outsider_key, limited_key):
            communicator = await open_with_token(key, job)
            assert (await communicator.receive_output(timeout=2))["code"] == 4404

    async_to_sync(scenario)()


def test_a_bad_token_is_refused_and_revoking_closes_an_open_socket(owner, project):
    from jobs.services.ingestion import ingest_logs

    job = running_job(owner, project)
    api_token, key = token(owner)

    async def scenario():
        refused = await open_with_token("gty_not-a-real-token", job)
        assert (await refused.receive_output(timeout=2))["code"] == 4401

        communicator = await open_with_token(key, job)
        await receive_until(communicator, lambda m: m["type"] == "caught_up")
        await sync_to_async(account_services.revoke_api_token)(actor=owner, token=api_token)
        await sync_to_async(ingest_logs)(job, 0, lines(1, 3))
        assert await communicator.receive_output(timeout=5) == {
            "type": "websocket.close",
            "code": 4401,
        }

    async_to_sync(scenario)()
