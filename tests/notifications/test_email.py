"""Email through Django's SMTP backend to a real SMTP server (aiosmtpd) on loopback."""

import re

import pytest

from jobs.services.submit import submit_job
from notifications import services
from notifications.models import Delivery, Subscription
from notifications.tasks import retry_due
from tests.notifications.conftest import RUN_TO_END
from tests.notifications.servers import Mailbox

pytestmark = pytest.mark.django_db


@pytest.fixture
def smtp(settings):
    with Mailbox() as mailbox:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = "127.0.0.1"
        settings.EMAIL_PORT = mailbox.port
        settings.EMAIL_USE_TLS = False
        settings.EMAIL_TIMEOUT = 5
        yield mailbox


def test_a_failed_job_is_emailed_to_its_submitter(owner, project, job, queue, move, smtp):
    services.create_subscription(
        owner, personal=True, name="me", channel="email", events=["job.failed"]
    )
    move(job, *RUN_TO_END, "failed", reason="exit code 137 (out of memory)")
    queue.run()
    (envelope,) = smtp.messages
    assert envelope.rcpt_tos == ["olivia@example.org"]
    text = envelope.content.decode()
    assert "Subject: [Gantry] Job failed: digits" in text
    assert "exit code 137 (out of memory)" in text and f"/jobs/{job.pk}/" in text
    assert Delivery.objects.get().state == "delivered"


def test_mail_the_server_refuses_is_retried(owner, project, job, queue, move, settings):
    with Mailbox() as mailbox:
        port = mailbox.port
    # The server is gone: nothing listens on its port now.
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    services.create_subscription(
        owner, project=project, name="lab list", channel="email", email="olivia@example.org",
        events=["job.succeeded"],
    )
    move(job, *RUN_TO_END, "succeeded")
    queue.run()
    row = Delivery.objects.get()
    assert row.state == "pending" and "mail not accepted" in row.last_error
    with Mailbox() as mailbox:
        settings.EMAIL_PORT = mailbox.port
        retry_due()
    row.refresh_from_db()
    assert row.state == "delivered" and mailbox.messages[0].rcpt_tos == ["olivia@example.org"]


def confirm_link(envelope) -> str:
    match = re.search(r"https?://[^/\s]+(/notifications/confirm/[^/\s]+/)", envelope.content.decode())
    assert match, envelope.content.decode()
    return match.group(1)


def test_a_viewer_cannot_have_events_mailed_to_an_address_that_did_not_confirm(
    owner, member, project, job, queue, move, smtp, api_for, client
):
    """A viewer of the project names someone else's address: that address gets one mail,
    the request to confirm, and no job events until the link in it is followed."""
    response = api_for(member).post(
        "/api/v1/notification-subscriptions/",
        {"personal": True, "project": project.pk, "name": "boss", "channel": "email",
         "email": "victim@example.org", "events": ["job.succeeded"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["email_confirmed_at"] is None
    (request,) = smtp.messages
    assert request.rcpt_tos == ["victim@example.org"]
    assert "Subject: [Gantry] Confirm notifications to this address" in request.content.decode()

    move(job, *RUN_TO_END, "succeeded")
    queue.run()
    assert len(smtp.messages) == 1 and not Delivery.objects.exists()
    # A test message does not get through either.
    services.send_test(member, Subscription.objects.get())
    assert len(smtp.messages) == 1
    assert Delivery.objects.get().last_error == "the address is not confirmed yet"

    # The address's owner (no account needed) follows the link and confirms.
    link = confirm_link(request)
    page = client.get(link)
    assert page.status_code == 200 and "Confirm victim@example.org" in page.content.decode()
    assert Subscription.objects.get().email_confirmed_at is None  # opening is not confirming
    assert "Confirmed" in client.post(link).content.decode()
    later = submit_job(owner, project, name="later", command="true")
    move(later, *RUN_TO_END, "succeeded")
    queue.run()
    assert [m.rcpt_tos for m in smtp.messages[1:]] == [["victim@example.org"]]
    assert "Job succeeded: later" in smtp.messages[1].content.decode()


def test_changing_the_address_asks_the_new_one_and_the_old_link_stops_working(
    member, project, smtp, client
):
    subscription, _ = services.create_subscription(
        member, personal=True, project=project, name="me", channel="email",
        events=["job.failed"],
    )
    assert subscription.email_confirmed_at is not None and smtp.messages == []  # their own
    services.update_subscription(member, subscription, email="other@example.org")
    subscription.refresh_from_db()
    assert subscription.email_confirmed_at is None
    old_link = confirm_link(smtp.messages[-1])
    services.update_subscription(member, subscription, email="third@example.org")
    response = client.post(old_link)
    assert response.status_code == 400 and "now mails another address" in response.content.decode()
    assert Subscription.objects.get().email_confirmed_at is None


def test_a_tampered_confirmation_link_confirms_nothing(member, project, smtp, client):
    services.create_subscription(
        member, personal=True, project=project, name="boss", channel="email",
        email="victim@example.org", events=["job.failed"],
    )
    link = confirm_link(smtp.messages[-1])
    response = client.post(link.replace("/confirm/", "/confirm/x"))
    assert response.status_code == 400 and "not valid" in response.content.decode()
    assert Subscription.objects.get().email_confirmed_at is None
