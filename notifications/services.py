"""Every change to subscriptions, and the fan-out of an event into deliveries and their
sending (called by views, the API and the tasks in tasks.py)."""

from __future__ import annotations

import secrets
import smtplib
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from core import audit
from notifications import delivery as channels
from notifications.models import (
    Channel,
    Delivery,
    DeliveryState,
    Event,
    ProjectAlertSettings,
    Subscription,
)
from projects.permissions import can, require

MAX_SUBSCRIPTIONS_PER_OWNER = 50


def _clean_events(events) -> list[str]:
    if not isinstance(events, list | tuple) or not events:
        raise ValidationError({"events": "Pick at least one event."})
    unknown = [e for e in events if e not in Event.values]
    if unknown:
        raise ValidationError({"events": f"Unknown events: {', '.join(map(str, unknown))[:200]}."})
    return sorted(set(events))


def _clean_target(channel: str, url: str, email: str) -> tuple[str, str]:
    if channel not in Channel.values:
        raise ValidationError({"channel": f"One of {', '.join(Channel.values)}."})
    if channel == Channel.EMAIL:
        try:
            validate_email(email)
        except ValidationError:
            raise ValidationError({"email": "An email address, e.g. lab@example.org."}) from None
        return url or "", email
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError({"url": "An http:// or https:// address."})
    return url, email or ""


def create_subscription(
    actor,
    *,
    name: str,
    channel: str,
    events,
    project=None,
    personal: bool = False,
    url: str = "",
    email: str = "",
) -> tuple[Subscription, str]:
    """A project's subscription (maintainers), or the actor's own (`personal`: their jobs,
    or every job of `project` they may see). Returns it and the webhook secret, which is
    shown once."""
    if personal:
        if project is not None:
            require(actor, "project.view", project)
        email = email or actor.email
    else:
        if project is None:
            raise ValidationError({"project": "A project subscription needs its project."})
        require(actor, "notification.manage", project)
    events = _clean_events(events)
    url, email = _clean_target(channel, url, email)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give it a name."})
    owned = Subscription.objects.filter(user=actor) if personal else Subscription.objects.filter(
        project=project, user__isnull=True
    )
    if owned.count() >= MAX_SUBSCRIPTIONS_PER_OWNER:
        raise ValidationError(f"At most {MAX_SUBSCRIPTIONS_PER_OWNER} subscriptions each.")
    secret = secrets.token_hex(24) if channel == Channel.WEBHOOK else ""
    with transaction.atomic():
        subscription = Subscription.objects.create(
            project=project,
            user=actor if personal else None,
            created_by=actor,
            name=name[:100],
            channel=channel,
            url=url,
            email=email,
            secret=secret,
            events=events,
        )
        audit.record(actor, "notification.create", subscription, tenant=subscription.tenant)
        _confirm_or_ask(actor, subscription)
    return subscription, secret


# --- confirming an address -------------------------------------------------------------
# Anyone who may see a project's jobs can name an address to hear of them; the address's
# owner says yes first, so nobody is mailed on someone else's say-so (Healthchecks and
# GitHub confirm added addresses the same way).

CONFIRM_SALT = "notifications.confirm-email"
CONFIRM_DAYS = 7


def _confirm_or_ask(actor, subscription: Subscription) -> None:
    """Confirm an email subscription to its creator's own address at once; mail any other
    address a link to confirm it (a mail that cannot go out rolls the change back)."""
    if subscription.channel != Channel.EMAIL:
        return
    own = (actor.email or "").strip().casefold()
    if own and subscription.email.strip().casefold() == own:
        subscription.email_confirmed_at = timezone.now()
        subscription.save(update_fields=["email_confirmed_at"])
        return
    subscription.email_confirmed_at = None
    subscription.save(update_fields=["email_confirmed_at"])
    token = signing.dumps({"s": subscription.pk, "e": subscription.email}, salt=CONFIRM_SALT)
    link = settings.GANTRY_URL.rstrip("/") + reverse(
        "notifications:subscription_confirm", args=[token]
    )
    about = f"jobs of {subscription.project}" if subscription.project_id else "jobs"
    who = actor.get_full_name() or actor.username
    try:
        send_mail(
            "[Gantry] Confirm notifications to this address",
            f"{who} asked Gantry to email {subscription.email} about {about} "
            f"(subscription “{subscription.name}”).\n\n"
            f"Nothing is sent to this address unless you confirm, within {CONFIRM_DAYS} "
            f"days:\n{link}\n\nIf you did not expect this, ignore this message.\n",
            None,
            [subscription.email],
        )
    except (OSError, smtplib.SMTPException) as exc:
        raise ValidationError(
            {"email": f"The confirmation mail could not be sent ({exc}); nothing was saved."}
        ) from exc


def subscription_to_confirm(token: str) -> Subscription:
    """The subscription a confirmation link names, while its address is still the one the
    link was mailed to; ValidationError saying why not otherwise."""
    try:
        data = signing.loads(token, salt=CONFIRM_SALT, max_age=timedelta(days=CONFIRM_DAYS))
    except signing.SignatureExpired:
        raise ValidationError(
            f"This confirmation link is older than {CONFIRM_DAYS} days. Ask whoever "
            "subscribed this address to save the subscription again for a new one."
        ) from None
    except signing.BadSignature:
        raise ValidationError(
            "This confirmation link is not valid. Check that it was copied whole."
        ) from None
    subscription = (
        Subscription.objects.filter(pk=data.get("s"), channel=Channel.EMAIL)
        .select_related("project", "created_by")
        .first()
    )
    if subscription is None or subscription.email != data.get("e"):
        raise ValidationError(
            "This subscription was deleted or now mails another address: nothing to confirm."
        )
    return subscription


@transaction.atomic
def confirm_email(token: str) -> Subscription:
    """Confirm the address a link was mailed to (following it twice is harmless)."""
    subscription = subscription_to_confirm(token)
    if subscription.email_confirmed_at is None:
        subscription.email_confirmed_at = timezone.now()
        subscription.save(update_fields=["email_confirmed_at"])
        audit.record(
            None, "notification.confirm", subscription,
            tenant=subscription.tenant, email=subscription.email,
        )
    return subscription


def require_manage(actor, subscription: Subscription) -> None:
    if subscription.personal:
        if subscription.user_id != actor.pk and not actor.is_superuser:
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied("This subscription is someone else's.")
    else:
        require(actor, "notification.manage", subscription)


def update_subscription(actor, subscription: Subscription, **fields) -> Subscription:
    """Change name, events, target or `active`; the channel and owner stay."""
    require_manage(actor, subscription)
    if "events" in fields:
        subscription.events = _clean_events(fields["events"])
    if "name" in fields:
        if not (fields["name"] or "").strip():
            raise ValidationError({"name": "Give it a name."})
        subscription.name = fields["name"].strip()[:100]
    email_before = subscription.email
    if "url" in fields or "email" in fields:
        subscription.url, subscription.email = _clean_target(
            subscription.channel,
            fields.get("url", subscription.url),
            fields.get("email", subscription.email),
        )
    if "active" in fields:
        subscription.active = bool(fields["active"])
    with transaction.atomic():
        subscription.save()
        audit.record(actor, "notification.change", subscription, tenant=subscription.tenant)
        if subscription.email != email_before or (
            "email" in fields and subscription.awaits_confirmation
        ):
            _confirm_or_ask(actor, subscription)
    return subscription


def delete_subscription(actor, subscription: Subscription) -> None:
    require_manage(actor, subscription)
    audit.record(actor, "notification.delete", subscription, tenant=subscription.tenant)
    subscription.delete()


def set_alert_settings(actor, project, *, waiting_minutes: int) -> ProjectAlertSettings:
    require(actor, "notification.manage", project)
    if not 1 <= int(waiting_minutes) <= 60 * 24 * 30:
        raise ValidationError({"waiting_minutes": "From 1 minute to 30 days (43200)."})
    row, _ = ProjectAlertSettings.objects.update_or_create(
        project=project, defaults={"waiting_minutes": int(waiting_minutes)}
    )
    audit.record(actor, "project.alert_settings", project, waiting_minutes=row.waiting_minutes)
    return row


def waiting_minutes_of(project) -> int:
    row = ProjectAlertSettings.objects.filter(project=project).first()
    return row.waiting_minutes if row else settings.GANTRY_NOTIFY_WAITING_MINUTES


# --- fan-out ---------------------------------------------------------------------------


def recipients(job, event: str) -> list[Subscription]:
    """The active subscriptions that want `event` of `job` and whose owner may see it
    (email ones once their address is confirmed)."""
    rows = (
        Subscription.objects.filter(active=True)
        .exclude(channel=Channel.EMAIL, email_confirmed_at__isnull=True)
        .filter(
            Q(project_id=job.project_id)
            | Q(user__isnull=False, project__isnull=True, user_id=job.created_by_id)
        )
        .select_related("user", "project")
    )
    chosen = []
    for subscription in rows:
        if event not in subscription.events:
            continue
        user = subscription.user
        if user is not None and not (user.is_active and can(user, "job.view", job)):
            continue
        chosen.append(subscription)
    return chosen


def payload_for(job, event: str, message: str, occurred_at) -> dict:
    label = Event(event).label
    url = f"{settings.GANTRY_URL}{job.get_absolute_url()}"
    text = f"{label}: {job.name} (#{job.pk}) in {job.project.tenant.slug}/{job.project.slug}"
    if message:
        text += f": {message}"
    return {
        "event": event,
        "title": f"{label}: {job.name}",
        "text": text,
        "message": message,
        "occurred_at": occurred_at.isoformat(),
        "url": url,
        "job": {
            "id": job.pk,
            "name": job.name,
            "kind": job.kind,
            "state": job.state,
            "attempt": job.attempt,
            "project": job.project.slug,
            "tenant": job.project.tenant.slug,
        },
    }


def record_event(job, event: str, message: str = "") -> list[tuple[int, int]]:
    """One pending delivery per recipient; returns the (subscription, job) queues to run."""
    now = timezone.now()
    payload = payload_for(job, event, message, now)
    subscriptions = recipients(job, event)
    Delivery.objects.bulk_create(
        Delivery(
            subscription=s,
            job=job,
            event=event,
            message=message[:2000],
            payload=payload,
            next_attempt_at=now,
        )
        for s in subscriptions
    )
    return [(s.pk, job.pk) for s in subscriptions]


# --- sending ---------------------------------------------------------------------------


def backoff(attempts: int) -> timedelta:
    """Wait after the `attempts`-th failed attempt: base, 2 x base, 4 x base, ..."""
    return timedelta(seconds=settings.GANTRY_NOTIFY_RETRY_SECONDS * 2 ** (attempts - 1))


def _claim(row: Delivery, now) -> bool:
    hold = now + timedelta(seconds=settings.GANTRY_NOTIFY_TIMEOUT_SECONDS + 60)
    return bool(
        Delivery.objects.filter(pk=row.pk, state=DeliveryState.PENDING)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=hold)
    )


def attempt(row: Delivery, now=None) -> bool:
    """Send one claimed delivery once and record the outcome; True if it got through."""
    now = now or timezone.now()
    row.attempts += 1
    try:
        row.last_status = channels.send(row)
    except channels.DeliveryError as exc:
        row.last_status = exc.status
        row.last_error = str(exc)[:500]
        if exc.final or row.attempts >= settings.GANTRY_NOTIFY_MAX_ATTEMPTS:
            row.state = DeliveryState.FAILING
        else:
            row.next_attempt_at = now + backoff(row.attempts)
        ok = False
    else:
        row.state = DeliveryState.DELIVERED
        row.delivered_at = timezone.now()
        row.last_error = ""
        ok = True
    row.claimed_until = None
    row.save(
        update_fields=[
            "attempts", "last_status", "last_error", "state", "next_attempt_at",
            "delivered_at", "claimed_until",
        ]
    )
    return ok


def deliver_queue(subscription_id: int, job_id: int | None, now=None) -> int:
    """Send the due deliveries of one subscription for one job, oldest first. A later
    event never overtakes an earlier one still pending: the run stops at the first row
    that is not due, is held by another worker, or failed an attempt and waits to retry.
    Rows given up on (failing) do not hold the rest back. Returns how many got through."""
    sent = 0
    pending = Delivery.objects.filter(
        subscription_id=subscription_id, job_id=job_id, state=DeliveryState.PENDING
    ).select_related("subscription")
    for row in pending.order_by("pk"):
        now_ = now or timezone.now()
        if row.next_attempt_at > now_ or not _claim(row, now_):
            break
        if attempt(row, now_):
            sent += 1
        elif row.state == DeliveryState.PENDING:
            break
    return sent


def due_queues(now=None) -> list[tuple[int, int | None]]:
    """(subscription, job) of every pending delivery whose time has come."""
    now = now or timezone.now()
    return list(
        Delivery.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lte=now)
        .values_list("subscription_id", "job_id")
        .distinct()
    )


def send_test(actor, subscription: Subscription) -> Delivery:
    """A ping to check a subscription's address: delivered (or not) at once, and logged."""
    require_manage(actor, subscription)
    row = Delivery.objects.create(
        subscription=subscription,
        job=None,
        event="ping",
        message="A test message from Gantry.",
        payload={"event": "ping", "title": "Test", "text": f"Gantry test: {subscription.name}"},
        next_attempt_at=timezone.now(),
        attempts=settings.GANTRY_NOTIFY_MAX_ATTEMPTS - 1,  # one try only
    )
    if _claim(row, timezone.now()):
        attempt(row)
    return row
