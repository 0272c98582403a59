"""Webhook deliveries against a real HTTP server on loopback: signed bodies, retries
after 500s and timeouts, giving up, and one job's events in order."""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.services.submit import submit_job
from notifications import services
from notifications.delivery import SIGNATURE_HEADER, sign, verify
from notifications.models import Delivery, DeliveryState, Event
from notifications.tasks import retry_due
from tests.notifications.conftest import RUN_TO_END
from tests.notifications.servers import Receiver, self_signed_certificate

pytestmark = pytest.mark.django_db


def hook(owner, project, url, events=(Event.SUCCEEDED, Event.FAILED), channel="webhook"):
    return services.create_subscription(
        owner, project=project, name="ci hook", channel=channel, url=url, events=list(events)
    )


def test_it_signs_the_body_with_the_hooks_secret(owner, project, job, queue, move):
    with Receiver() as receiver:
        subscription, secret = hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "succeeded", reason="exit code 0")
        queue.run()
    assert len(secret) == 48 and subscription.secret == secret
    (headers, body), = receiver.received
    assert verify(secret, headers[SIGNATURE_HEADER], body)
    assert not verify("another secret", headers[SIGNATURE_HEADER], body)
    assert not verify(secret, headers[SIGNATURE_HEADER], body.replace(b"digits", b"digitz"))
    payload = json.loads(body)
    assert payload["event"] == "job.succeeded" and payload["job"]["id"] == job.pk
    assert payload["job"]["state"] == "succeeded" and payload["message"] == "exit code 0"
    assert headers["X-Gantry-Event"] == "job.succeeded"
    assert Delivery.objects.get().state == DeliveryState.DELIVERED


def test_an_old_signature_is_refused_by_the_verifier():
    body = b'{"event": "job.failed"}'
    header = sign("s3cret", 1_000_000, body)
    assert verify("s3cret", header, body, now=1_000_100)
    assert not verify("s3cret", header, body, now=1_000_000 + 3600)
    assert not verify("s3cret", "t=x,v1=y", body) and not verify("s3cret", "", body)


def test_it_retries_after_500s_then_delivers(owner, project, job, queue, move):
    with Receiver(script=[500, 503]) as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "failed", reason="exit code 1")
        queue.run()
        row = Delivery.objects.get()
        assert (row.state, row.attempts, row.last_status) == ("pending", 1, 500)
        assert "HTTP 500" in row.last_error
        retry_due()
        retry_due()
    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_status, row.last_error) == ("delivered", 3, 200, "")
    assert len(receiver.received) == 3
    # Every attempt carries the same body (signed afresh).
    assert len({body for _, body in receiver.received}) == 1


def test_it_retries_after_a_timeout_then_delivers(owner, project, job, queue, move, settings):
    with Receiver(script=[("stall", 1.6)]) as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
        row = Delivery.objects.get()
        assert row.state == "pending" and "no answer within 1 s" in row.last_error
        retry_due()
    row.refresh_from_db()
    assert row.state == "delivered" and row.attempts == 2


def test_a_dead_endpoint_is_marked_failing_after_the_last_attempt(owner, project, job, queue, move):
    with Receiver(script=[500, 500, 500, 500]) as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
        for _ in range(5):
            retry_due()
    row = Delivery.objects.get()
    assert (row.state, row.attempts) == ("failing", 3)  # GANTRY_NOTIFY_MAX_ATTEMPTS
    assert len(receiver.received) == 3  # nothing more after giving up


def test_backoff_doubles_with_each_attempt(settings):
    settings.GANTRY_NOTIFY_RETRY_SECONDS = 30
    assert [services.backoff(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]


def test_a_failed_attempt_waits_out_its_backoff(owner, project, job, queue, move, settings):
    settings.GANTRY_NOTIFY_RETRY_SECONDS = 3600
    with Receiver(script=[500]) as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
        assert retry_due() == 0  # not due for an hour
    assert len(receiver.received) == 1


def test_a_later_event_of_a_job_waits_for_an_earlier_undelivered_one(
    owner, project, job, queue, move, settings
):
    """Preempted, then failed: the failure is not sent while the preemption is still
    being retried, and both arrive in the order they happened."""
    settings.GANTRY_NOTIFY_RETRY_SECONDS = 600
    with Receiver(script=[500]) as receiver:
        hook(owner, project, receiver.url, events=[Event.PREEMPTED, Event.FAILED])
        move(job, *RUN_TO_END)
        move(job, "queued", reason="borrowed GPUs reclaimed; requeued (preemption 1)")
        queue.run()  # the preemption's delivery fails once
        move(job, *RUN_TO_END, "failed", reason="exit code 2")
        queue.run()  # the failure's turn has not come: the preemption waits to retry
        assert [b["event"] for b in receiver.bodies()] == ["job.preempted"]
        assert retry_due() == 0
        retry_due(now=timezone.now() + timedelta(minutes=11))
    assert [b["event"] for b in receiver.bodies()] == [
        "job.preempted", "job.preempted", "job.failed"
    ]
    assert set(Delivery.objects.values_list("state", flat=True)) == {"delivered"}


def test_another_jobs_events_are_not_held_up(owner, project, job, queue, move):
    from jobs.services.submit import submit_job

    other = submit_job(owner, project, name="other", command="python other.py")
    with Receiver(script=[500]) as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "failed")
        queue.run()
        move(other, *RUN_TO_END, "succeeded")
        queue.run()
    assert [b["job"]["name"] for b in receiver.bodies()] == ["digits", "other"]


def test_slack_hooks_get_text_payloads(owner, project, job, queue, move):
    with Receiver() as receiver:
        hook(owner, project, receiver.url, channel="slack")
        move(job, *RUN_TO_END, "failed", reason="CUDA out of memory")
        queue.run()
    (body,) = receiver.bodies()
    assert list(body) == ["text"]
    assert body["text"] == f"Job failed: digits (#{job.pk}) in lab-a/vision: CUDA out of memory"


def test_a_redirect_is_not_followed(owner, project, job, queue, move):
    with Receiver(script=[302]) as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
    row = Delivery.objects.get()
    assert row.state == "pending" and row.last_status == 302


def test_a_state_change_commits_at_once_with_a_dead_hook(owner, project, job, queue, move):
    """The receiver only queues a task: the endpoint is not called while the job moves."""
    with Receiver(script=[("stall", 1.6)]) as receiver:
        hook(owner, project, receiver.url)
        started = time.monotonic()
        move(job, *RUN_TO_END, "succeeded")
        job.refresh_from_db()
        assert job.state == "succeeded"
        assert receiver.received == [] and not Delivery.objects.exists()
        assert queue.names() == ["notifications.tasks.notify"]
        queue.run()
    assert len(receiver.received) == 1 and Delivery.objects.get().state == "pending"
    assert started  # (no timing assertion: what shows it is that nothing was sent inline)


def test_a_private_address_is_refused_where_not_allowed(owner, project, job, queue, move, settings):
    settings.GANTRY_NOTIFY_ALLOW_PRIVATE_HOSTS = False
    with Receiver() as receiver:
        hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
    row = Delivery.objects.get()
    assert (row.state, row.attempts) == ("failing", 1)  # no use trying again
    assert row.last_error == "refused: 127.0.0.1 is a private or local address (127.0.0.1)"
    assert receiver.received == []


HOOK_HOST = "hooks.example.test"
PUBLIC = "93.184.216.34"


@pytest.fixture
def dns(monkeypatch):
    """A resolver whose answers for HOOK_HOST are scripted, one per question (the last
    one repeats), as a name an attacker controls answers; other names resolve as usual.
    `connects` holds the address of every connection opened: PUBLIC is refused as an
    unreachable host would, anything else is really connected to."""
    import socket

    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.create_connection

    class Resolver:
        answers: list[str] = []
        connects: list[tuple] = []

        def getaddrinfo(self, host, port, *args, **kwargs):
            if host != HOOK_HOST:
                return real_getaddrinfo(host, port, *args, **kwargs)
            address = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 0))]

        def create_connection(self, address, *args, **kwargs):
            self.connects.append(address)
            if address[0] == PUBLIC:
                raise ConnectionRefusedError("connection refused")
            return real_connect(address, *args, **kwargs)

    resolver = Resolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver.getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", resolver.create_connection)
    return resolver


def test_a_name_that_rebinds_to_loopback_after_the_check_is_not_reached(
    owner, project, job, queue, move, settings, dns
):
    """The check sees a public address; a second lookup would say 127.0.0.1, where a
    real server listens. The connection goes to the address that was checked."""
    settings.GANTRY_NOTIFY_ALLOW_PRIVATE_HOSTS = False
    dns.answers = [PUBLIC, "127.0.0.1"]
    with Receiver() as receiver:
        hook(owner, project, f"http://{HOOK_HOST}:{receiver.port}/hook")
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
    assert receiver.received == []
    assert dns.connects == [(PUBLIC, receiver.port)]  # the pinned, checked address
    row = Delivery.objects.get()
    assert (row.state, row.attempts) == ("pending", 1)
    assert row.last_error == "could not connect: connection refused"


def test_a_pinned_https_hook_still_checks_the_certificate_against_the_host_name(
    owner, project, job, queue, move, settings, dns, tmp_path, monkeypatch
):
    """Connecting to the checked address keeps TLS about the name: the server is asked for
    it (SNI), its certificate must carry it, and it is the Host header."""
    cert_file, key_file = self_signed_certificate(tmp_path, HOOK_HOST)
    monkeypatch.setenv("SSL_CERT_FILE", cert_file)
    dns.answers = ["127.0.0.1", "127.0.0.2"]
    with Receiver(tls=(cert_file, key_file)) as receiver:
        by_name, _ = hook(owner, project, f"https://{HOOK_HOST}:{receiver.port}/hook")
        move(job, *RUN_TO_END, "succeeded")
        queue.run()
        assert Delivery.objects.get().state == "delivered"
        assert dns.connects == [("127.0.0.1", receiver.port)]
        assert receiver.server_names == [HOOK_HOST]
        assert receiver.received[0][0]["Host"] == f"{HOOK_HOST}:{receiver.port}"

        # The same server under an address (not the name on its certificate) is refused.
        services.delete_subscription(owner, by_name)
        hook(owner, project, receiver.url)
        move(submit_job(owner, project, name="b", command="true"), *RUN_TO_END, "succeeded")
        queue.run()
    refused = Delivery.objects.get()
    assert refused.state == "pending" and "certificate verify failed" in refused.last_error
    assert len(receiver.received) == 1
