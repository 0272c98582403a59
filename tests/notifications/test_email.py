"""Email through Django's SMTP backend to a real SMTP server (aiosmtpd) on loopback."""

import pytest

from notifications import services
from notifications.models import Delivery
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
        owner, project=project, name="lab list", channel="email", email="lab@example.org",
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
    assert row.state == "delivered" and mailbox.messages[0].rcpt_tos == ["lab@example.org"]
