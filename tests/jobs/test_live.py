"""The live job page's websocket (jobs/consumers.py) and the log endpoints behind it.

The consumer runs inside `config.asgi.application` (origin check, session auth,
routing) and is driven with channels' WebsocketCommunicator; the data arrives
through the same services the executor endpoints call. The tests need a
transactional database: the consumer reads it from other threads.
"""

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, Client
from django.urls import reverse

from accounts import services as account_services
from accounts.models import Membership
from config.asgi import application
from jobs import consumers
from jobs.models import Job
from jobs.services import ingestion
from jobs.services.submit import submit_job
from jobs.states import transition
from projects import services as project_services

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_layer(settings):
    # The in-memory layer's queues belong to one event loop; each test makes its own.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def running_job(owner, project, **spec):
    job = submit_job(owner, project, command="python train.py", **spec)
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token("s3cret"))
    return job


def lines(first, last, worker=0, text="line {seq}"):
    return [
        {"seq": s, "stream": "stdout", "ts": 1000.0 + s / 1000, "text": text.format(seq=s)}
        for s in range(first, last + 1)
    ]


def session_cookie(client, user):
    client = Client()  # one session per user: logging another user in would end the first
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(cookie, job, query=""):
    headers = [(b"origin", b"http://testserver")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    communicator = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/?{query}", headers)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def receive_until(communicator, predicate, timeout=5):
    """Messages until one satisfies `predicate` (included)."""
    got = []
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        got.append(message)
        if predicate(message):
            return got


def seqs(messages, worker=0):
    return [
        ln["seq"]
        for m in messages
        if m["type"] == "lines"
        for ln in m["lines"]
        if ln["worker"] == worker
    ]


ingest = sync_to_async(ingestion.ingest_logs)
ingest_metrics = sync_to_async(ingestion.ingest_metrics)


def test_anonymous_socket_is_closed_with_4401(owner, project):
    job = running_job(owner, project)

    async def scenario():
        communicator = await open_socket(None, job)
        assert await communicator.receive_output(timeout=2) == {
            "type": "websocket.close",
            "code": 4401,
        }

    async_to_sync(scenario)()


def test_outsider_socket_is_closed_with_4404(client, owner, outsider, project):
    job = running_job(owner, project)
    cookie = session_cookie(client, outsider)

    async def scenario():
        communicator = await open_socket(cookie, job)
        assert (await communicator.receive_output(timeout=2))["code"] == 4404
        missing = await open_socket(cookie, Job(pk=999_999))
        assert (await missing.receive_output(timeout=2))["code"] == 4404

    async_to_sync(scenario)()


def test_bad_query_is_closed_with_4400(client, owner, project):
    job = running_job(owner, project)
    cookie = session_cookie(client, owner)

    async def scenario():
        for query in ("worker=7", "after=x", "worker=0&after=-3"):
            communicator = await open_socket(cookie, job, query)
            messages = []
            while True:
                out = await communicator.receive_output(timeout=2)
                if out["type"] == "websocket.close":
                    break
                messages.append(json.loads(out["text"]))
            assert out["code"] == 4400, query
            assert messages[-1]["type"] == "error"

    async_to_sync(scenario)()


# --- access lost while the socket is open ---------------------------------------------


async def closes_instead_of_forwarding(communicator, job, code):
    """A live line after the change: the socket closes with `code` and the line never arrives."""
    await receive_until(communicator, lambda m: m["type"] == "caught_up")
    await ingest(job, 0, lines(1, 5))
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": code}
    assert await communicator.receive_nothing(timeout=0.5)


@pytest.fixture
def recheck_every_message(settings):
    settings.GANTRY_WS_RECHECK_SECONDS = 0


def test_removed_member_socket_closes_with_4403(client, owner, member, tenant, project, recheck_every_message):
    job = running_job(owner, project)
    cookie = session_cookie(client, member)
    membership = Membership.objects.get(tenant=tenant, user=member)

    async def scenario():
        communicator = await open_socket(cookie, job)
        await sync_to_async(account_services.TENANT_MEMBERS.remove)(actor=owner, member=membership)
        await closes_instead_of_forwarding(communicator, job, 4403)

    async_to_sync(scenario)()


def test_project_made_private_closes_a_viewers_socket(client, owner, member, project, recheck_every_message):
    job = running_job(owner, project)
    cookie = session_cookie(client, member)

    async def scenario():
        communicator = await open_socket(cookie, job)
        await sync_to_async(project_services.update_project)(
            actor=owner, project=project, visibility="private"
        )
        await closes_instead_of_forwarding(communicator, job, 4403)

    async_to_sync(scenario)()


def test_logout_closes_the_socket_with_4401(owner, project, recheck_every_message):
    job = running_job(owner, project)
    browser = Client()
    browser.force_login(owner)

    async def scenario():
        communicator = await open_socket(browser.cookies["sessionid"].value, job)
        await sync_to_async(browser.logout)()
        await closes_instead_of_forwarding(communicator, job, 4401)

    async_to_sync(scenario)()


def test_deactivated_user_socket_closes_with_4401(client, owner, project, recheck_every_message):
    job = running_job(owner, project)
    cookie = session_cookie(client, owner)

    async def scenario():
        communicator = await open_socket(cookie, job)
        owner.is_active = False
        await owner.asave(update_fields=["is_active"])
        await closes_instead_of_forwarding(communicator, job, 4401)

    async_to_sync(scenario)()


def test_the_poll_forwards_nothing_after_access_is_lost(
    client, owner, member, tenant, project, monkeypatch, recheck_every_message
):
    """Changes made in another process arrive by the poll: it re-checks before sending too."""
    monkeypatch.setattr(consumers, "POLL_SECONDS", 0.1)
    job = running_job(owner, project)
    cookie = session_cookie(client, member)
    membership = Membership.objects.get(tenant=tenant, user=member)

    async def scenario():
        communicator = await open_socket(cookie, job)
        await receive_until(communicator, lambda m: m["type"] == "caught_up")
        monkeypatch.setattr(consumers, "publish", lambda *a: None)  # another process
        await sync_to_async(account_services.TENANT_MEMBERS.remove)(actor=owner, member=membership)
        await sync_to_async(transition)(job, "running", "running")
        await sync_to_async(ingestion.ingest_logs)(job, 0, lines(1, 3))
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
        assert await communicator.receive_nothing(timeout=0.5)

    async_to_sync(scenario)()


def test_access_is_rechecked_at_most_every_interval(client, owner, member, tenant, project, settings):
    # The price of not querying per message: a removed member may still get lines for up
    # to GANTRY_WS_RECHECK_SECONDS. Within the interval nothing is asked of the database.
    settings.GANTRY_WS_RECHECK_SECONDS = 3600
    job = running_job(owner, project)
    cookie = session_cookie(client, member)
    membership = Membership.objects.get(tenant=tenant, user=member)

    async def scenario():
        communicator = await open_socket(cookie, job)
        await receive_until(communicator, lambda m: m["type"] == "caught_up")
        await sync_to_async(account_services.TENANT_MEMBERS.remove)(actor=owner, member=membership)
        await ingest(job, 0, lines(1, 5))
        live = await communicator.receive_json_from(timeout=5)
        assert live["type"] == "lines" and live["lines"][-1]["seq"] == 5
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_member_gets_backfill_then_live_lines(client, owner, member, project):
    job = running_job(owner, project)
    ingestion.ingest_logs(job, 0, lines(1, 30))
    cookie = session_cookie(client, member)  # a tenant member views the project

    async def scenario():
        communicator = await open_socket(cookie, job)
        first = await receive_until(communicator, lambda m: m["type"] == "caught_up")
        assert first[0]["type"] == "status" and first[0]["state"] == "starting"
        assert seqs(first) == list(range(1, 31))
        assert all(not m["live"] for m in first if m["type"] == "lines")

        await ingest(job, 0, lines(31, 35))
        live = await communicator.receive_json_from(timeout=5)
        assert live["type"] == "lines" and live["live"]
        assert [ln["seq"] for ln in live["lines"]] == [31, 32, 33, 34, 35]
        assert live["lines"][0] == {
            "worker": 0,
            "seq": 31,
            "stream": "stdout",
            "ts": 1000.031,
            "text": "line 31",
        }
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_fresh_page_gets_only_the_recent_tail(client, owner, project, monkeypatch):
    monkeypatch.setattr(consumers, "BACKFILL_TAIL", 50)
    job = running_job(owner, project)
    for first in range(1, 200, 20):
        ingestion.ingest_logs(job, 0, lines(first, first + 19))
    cookie = session_cookie(client, owner)

    async def scenario():
        communicator = await open_socket(cookie, job)
        got = await receive_until(communicator, lambda m: m["type"] == "caught_up")
        assert seqs(got) == list(range(151, 201))
        assert {"type": "truncated", "worker": 0, "before": 151} in got

    async_to_sync(scenario)()


def test_resume_with_after_loses_and_repeats_nothing(client, owner, project):
    job = running_job(owner, project)
    ingestion.ingest_logs(job, 0, lines(1, 100))
    cookie = session_cookie(client, owner)

    async def scenario():
        seen = []
        communicator = await open_socket(cookie, job)
        seen += seqs(await receive_until(communicator, lambda m: m["type"] == "caught_up"))
        await ingest(job, 0, lines(101, 150))
        seen += seqs([await communicator.receive_json_from(timeout=5)])
        await communicator.disconnect()

        # Lines written while nobody listened, and more while the client reconnects.
        await ingest(job, 0, lines(151, 400))
        communicator = await open_socket(cookie, job, f"after={seen[-1]}")
        await ingest(job, 0, lines(401, 420))
        got = await receive_until(
            communicator, lambda m: m["type"] == "lines" and m["lines"][-1]["seq"] == 420
        )
        seen += seqs(got)
        assert seen == list(range(1, 421))

    async_to_sync(scenario)()


def test_a_dropped_live_message_is_filled_from_storage(client, owner, project, monkeypatch):
    job = running_job(owner, project)
    cookie = session_cookie(client, owner)

    async def scenario():
        communicator = await open_socket(cookie, job, "after=0")
        await receive_until(communicator, lambda m: m["type"] == "caught_up")
        with monkeypatch.context() as patch:
            # The layer loses a batch (a full in-memory queue drops silently).
            patch.setattr(ingestion, "publish_lines", lambda *args: None)
            await ingest(job, 0, lines(1, 10))
        await ingest(job, 0, lines(11, 12))
        got = await receive_until(
            communicator, lambda m: m["type"] == "lines" and m["lines"][-1]["seq"] == 12
        )
        assert seqs(got) == list(range(1, 13))

    async_to_sync(scenario)()


def test_two_viewers_see_the_same_lines(client, owner, member, project):
    job = running_job(owner, project)
    owner_cookie = session_cookie(client, owner)
    member_cookie = session_cookie(client, member)

    async def scenario():
        a = await open_socket(owner_cookie, job, "after=0")
        b = await open_socket(member_cookie, job, "after=0")
        for c in (a, b):
            await receive_until(c, lambda m: m["type"] == "caught_up")
        for first in range(1, 60, 10):
            await ingest(job, 0, lines(first, first + 9))
        for c in (a, b):
            got = await receive_until(
                c, lambda m: m["type"] == "lines" and m["lines"][-1]["seq"] == 60
            )
            assert seqs(got) == list(range(1, 61))

    async_to_sync(scenario)()


def test_distributed_job_interleaves_workers_or_shows_one(client, owner, project):
    job = running_job(owner, project, workers=2, kind="distributed")
    # Worker 1 wrote between worker 0's lines (by timestamp).
    ingestion.ingest_logs(job, 0, [{"seq": 1, "stream": "stdout", "ts": 1.0, "text": "a"}])
    ingestion.ingest_logs(job, 1, [{"seq": 1, "stream": "stderr", "ts": 2.0, "text": "b"}])
    ingestion.ingest_logs(job, 0, [{"seq": 2, "stream": "stdout", "ts": 3.0, "text": "c"}])
    cookie = session_cookie(client, owner)

    async def scenario():
        both = await open_socket(cookie, job, "worker=all")
        got = await receive_until(both, lambda m: m["type"] == "caught_up")
        texts = [ln["text"] for m in got if m["type"] == "lines" for ln in m["lines"]]
        assert texts == ["a", "b", "c"]
        one = await open_socket(cookie, job, "worker=1&after=0")
        got = await receive_until(one, lambda m: m["type"] == "caught_up")
        assert [ln["text"] for m in got if m["type"] == "lines" for ln in m["lines"]] == ["b"]
        await ingest(job, 0, [{"seq": 3, "stream": "stdout", "ts": 4.0, "text": "d"}])
        await ingest(job, 1, [{"seq": 2, "stream": "stdout", "ts": 5.0, "text": "e"}])
        live = await one.receive_json_from(timeout=5)
        assert [ln["text"] for ln in live["lines"]] == ["e"]  # worker 0's line is not for it
        resumed = await open_socket(cookie, job, "worker=all&after=0:1,1:1")
        got = await receive_until(resumed, lambda m: m["type"] == "caught_up")
        assert [ln["text"] for m in got if m["type"] == "lines" for ln in m["lines"]] == [
            "c",
            "d",
            "e",
        ]

    async_to_sync(scenario)()


def test_status_changes_are_pushed_with_their_timeline_event(client, owner, project):
    job = running_job(owner, project)
    cookie = session_cookie(client, owner)

    async def scenario():
        communicator = await open_socket(cookie, job)
        await receive_until(communicator, lambda m: m["type"] == "caught_up")
        await sync_to_async(transition)(job, "running", "running on GPU 0")
        message = await communicator.receive_json_from(timeout=5)
        assert message["type"] == "status"
        assert message["state"] == "running" and message["label"] == "Running"
        assert message["badge"] == "text-bg-primary" and not message["terminal"]
        assert message["reason"] == "running on GPU 0"
        assert [(e["from"], e["to"]) for e in message["events"]] == [("starting", "running")]
        await sync_to_async(transition)(job, "succeeded", "exited with code 0")
        message = await communicator.receive_json_from(timeout=5)
        assert message["state"] == "succeeded" and message["terminal"]

    async_to_sync(scenario)()


def test_status_changes_made_elsewhere_arrive_by_the_poll(client, owner, project, monkeypatch):
    """The embedded default: a django-q worker's transition never reaches this layer."""
    monkeypatch.setattr(consumers, "POLL_SECONDS", 0.1)
    job = running_job(owner, project)
    cookie = session_cookie(client, owner)

    async def scenario():
        communicator = await open_socket(cookie, job)
        await receive_until(communicator, lambda m: m["type"] == "caught_up")
        monkeypatch.setattr(consumers, "publish", lambda *a: None)  # another process
        await sync_to_async(transition)(job, "running", "running")
        await sync_to_async(ingestion.ingest_logs)(job, 0, lines(1, 3))
        got = await receive_until(
            communicator, lambda m: m["type"] == "lines" and m["lines"][-1]["seq"] == 3
        )
        statuses = [m for m in got if m["type"] == "status"]
        assert statuses and statuses[0]["state"] == "running"
        assert seqs(got) == [1, 2, 3]

    async_to_sync(scenario)()


def test_metrics_are_backfilled_and_pushed(client, owner, project):
    job = running_job(owner, project)
    ingestion.ingest_metrics(
        job, 0, [{"seq": s, "name": "loss", "step": s, "value": 1 / s, "ts": 5.0} for s in (1, 2)]
    )
    cookie = session_cookie(client, owner)

    async def scenario():
        communicator = await open_socket(cookie, job)
        got = await receive_until(communicator, lambda m: m["type"] == "caught_up")
        points = [p for m in got if m["type"] == "metrics" for p in m["points"]]
        assert [(p["name"], p["step"], p["value"]) for p in points] == [
            ("loss", 1, 1.0),
            ("loss", 2, 0.5),
        ]
        await ingest_metrics(job, 0, [{"seq": 3, "name": "loss", "step": 3, "value": 0.25}])
        live = await communicator.receive_json_from(timeout=5)
        assert live["type"] == "metrics" and live["points"][0]["step"] == 3
        resumed = await open_socket(cookie, job, "metrics_after=2")
        got = await receive_until(resumed, lambda m: m["type"] == "caught_up")
        assert [p["seq"] for m in got if m["type"] == "metrics" for p in m["points"]] == [3]

    async_to_sync(scenario)()


# --- HTTP: earlier lines and the download ---------------------------------------------------


def test_api_pages_backwards_with_before(api_for, owner, project):
    job = running_job(owner, project)
    for first in range(1, 100, 10):
        ingestion.ingest_logs(job, 0, lines(first, first + 9))
    api = api_for(owner)
    url = reverse("job-logs", args=[job.pk])
    body = api.get(url, {"before": 55, "limit": 20}).json()
    assert [ln["seq"] for ln in body["results"]] == list(range(35, 55))
    assert body["next_before"] == 35 and not body["complete"]
    body = api.get(url, {"before": 35, "limit": 100}).json()
    assert [ln["seq"] for ln in body["results"]] == list(range(1, 35)) and body["complete"]
    assert api.get(url, {"before": "soon"}).status_code == 400


def test_download_streams_the_whole_log(client, owner, project):
    job = running_job(owner, project)
    total = 60_000
    for first in range(1, total, 500):
        ingestion.ingest_logs(job, 0, lines(first, first + 499, text="step {seq} \x1b[32mok\x1b[0m"))
    client.force_login(owner)
    response = client.get(reverse("jobs:job_log_download", args=[job.pk]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}.log"'
    blocks = list(response.streaming_content)
    assert len(blocks) > 10  # streamed in pieces, not one body
    text = b"".join(blocks).decode()
    assert text.count("\n") == total
    assert text.startswith("step 1 \x1b[32mok\x1b[0m\nstep 2 ")
    assert text.endswith(f"step {total} \x1b[32mok\x1b[0m\n")


def test_download_streams_asynchronously_under_asgi(owner, project):
    """Under ASGI a synchronous iterator would be read whole into memory first."""
    job = running_job(owner, project, workers=2, kind="distributed")
    ingestion.ingest_logs(job, 0, [{"seq": 1, "stream": "stdout", "ts": 1.0, "text": "zero"}])
    ingestion.ingest_logs(job, 1, [{"seq": 1, "stream": "stdout", "ts": 0.5, "text": "one"}])

    async def scenario():
        async_client = AsyncClient()
        await async_client.aforce_login(owner)
        url = reverse("jobs:job_log_download", args=[job.pk])
        response = await async_client.get(url)
        assert response.is_async
        body = b"".join([block async for block in response.streaming_content]).decode()
        assert body == "[worker 1] one\n[worker 0] zero\n"
        only = await async_client.get(url, {"worker": "1"})
        assert b"".join([b async for b in only.streaming_content]) == b"one\n"
        assert (await async_client.get(url, {"worker": "5"})).status_code == 400

    async_to_sync(scenario)()


def test_compare_page_charts_a_metric_across_jobs(client, owner, outsider, project):
    a = running_job(owner, project, name="lr 0.1")
    b = running_job(owner, project, name="lr 0.01")
    for job, scale in ((a, 1.0), (b, 2.0)):
        ingestion.ingest_metrics(
            job,
            0,
            [{"seq": s, "name": "loss", "step": s, "value": scale / s} for s in range(1, 6)],
        )
    client.force_login(owner)
    url = reverse("jobs:metric_compare", args=[project.pk])
    response = client.get(url, {"name": "loss", "job": [a.pk, b.pk]})
    assert response.status_code == 200
    series = response.context["series"]
    assert {s["job"] for s in series} == {a.pk, b.pk}
    assert next(s for s in series if s["job"] == b.pk)["points"][0] == [1, 2.0]
    assert client.get(url, {"job": "x"}).status_code == 400
    client.force_login(outsider)
    assert client.get(url).status_code == 404


def test_the_job_page_wires_the_live_view(client, owner, project):
    job = running_job(owner, project)
    client.force_login(owner)
    page = client.get(job.get_absolute_url()).content.decode()
    assert f'data-ws-path="/ws/jobs/{job.pk}/"' in page
    assert "jobs/live.js" in page and "vendor/uplot/uPlot.iife.min.js" in page
    assert "<script>" not in page  # no inline scripts


def test_publish_failures_never_break_ingestion(owner, project, monkeypatch):
    class Broken:
        async def group_send(self, *args):
            raise ConnectionError("redis is down")

    monkeypatch.setattr(consumers, "get_channel_layer", lambda: Broken())
    job = running_job(owner, project)
    assert ingestion.ingest_logs(job, 0, lines(1, 3)) == 3
