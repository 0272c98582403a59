"""Sending one delivery over its channel: signed JSON webhooks, Slack/Mattermost
incoming-webhook text, and email through Django's email backend.

A webhook's body is signed with its subscription's secret, Stripe-style:
`X-Gantry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, so a
receiver checks both the body and its age (replays of an old body fail the age check).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail

from notifications.models import Channel, Delivery

SIGNATURE_HEADER = "X-Gantry-Signature"


class DeliveryError(Exception):
    """An attempt that did not get through; `status` is the HTTP answer, if any, and
    `final` says that trying again cannot help."""

    def __init__(self, message: str, status: int | None = None, final: bool = False):
        super().__init__(message)
        self.status = status
        self.final = final


def resolve_checked(host: str, port: int) -> str:
    """The one address a hook's connection will use: DNS is asked once, every answer must
    be public (unless private hosts are allowed), and the caller connects to the first.
    Resolving again to connect would let a name answer a public address to this check
    and 127.0.0.1 to the connection (DNS rebinding)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DeliveryError(f"could not resolve {host}: {exc}") from exc
    addresses = [info[4][0] for info in infos]
    if not addresses:
        raise DeliveryError(f"could not resolve {host}: no addresses")
    if not settings.GANTRY_NOTIFY_ALLOW_PRIVATE_HOSTS:
        for address in addresses:
            if not ipaddress.ip_address(address.split("%")[0]).is_global:
                raise DeliveryError(
                    f"refused: {host} is a private or local address ({address})", final=True
                )
    return addresses[0]


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, tolerance_s: int = 300, now=None) -> bool:
    """What a receiver does (and the tests): the header's MAC matches and is recent."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A hook answers for itself: following a redirect would send the signed body to an
    # address nobody configured.
    def redirect_request(self, *args, **kwargs):
        return None


def _pinned(connection_class):
    """An http.client connection that opens its socket to `address`, checked beforehand,
    and otherwise speaks to the URL's host: the Host header, and for HTTPS the server
    name sent (SNI) and the one the certificate must carry."""

    class Pinned(connection_class):
        def __init__(self, host, *, address: str, **kwargs):
            super().__init__(host, **kwargs)
            self._create_connection = lambda target, *args: socket.create_connection(
                (address, target[1]), *args
            )

    return Pinned


_PinnedHTTPConnection = _pinned(http.client.HTTPConnection)
_PinnedHTTPSConnection = _pinned(http.client.HTTPSConnection)


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, address: str):
        super().__init__()
        self.address = address

    def http_open(self, req):
        return self.do_open(_PinnedHTTPConnection, req, address=self.address)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, address: str):
        super().__init__(context=ssl.create_default_context())
        self.address = address

    def https_open(self, req):
        return self.do_open(
            _PinnedHTTPSConnection, req, context=self._context, address=self.address
        )


def _opener(address: str) -> urllib.request.OpenerDirector:
    # No proxies from the environment: a proxy would resolve the name again itself.
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        _NoRedirects,
        _PinnedHTTPHandler(address),
        _PinnedHTTPSHandler(address),
    )


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise DeliveryError(f"bad address: {exc}", final=True) from exc
    address = resolve_checked(parts.hostname or "", port)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    timeout = settings.GANTRY_NOTIFY_TIMEOUT_SECONDS
    try:
        with _opener(address).open(request, timeout=timeout) as response:
            response.read(1024)
            return response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"answered HTTP {exc.code}", status=exc.code) from exc
    except TimeoutError as exc:
        raise DeliveryError(f"no answer within {timeout} s") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise DeliveryError(f"no answer within {timeout} s") from exc
        raise DeliveryError(f"could not connect: {reason}") from exc


def send(delivery: Delivery) -> int | None:
    """One attempt; returns the HTTP status (None for email), raises DeliveryError."""
    subscription = delivery.subscription
    if subscription.channel == Channel.EMAIL:
        return _send_email(delivery)
    if subscription.channel == Channel.SLACK:
        body = json.dumps({"text": delivery.payload.get("text", delivery.message)}).encode()
    else:
        body = json.dumps(delivery.payload, sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Gantry-Hooks/1",
        "X-Gantry-Event": delivery.event,
        "X-Gantry-Delivery": str(delivery.pk),
    }
    if subscription.secret:
        headers[SIGNATURE_HEADER] = sign(subscription.secret, int(time.time()), body)
    return _post(subscription.url, body, headers)


def _send_email(delivery: Delivery) -> None:
    if delivery.subscription.awaits_confirmation:
        # Fan-out skips these; this also stops a test message, and a delivery queued
        # before the address was changed to one not yet confirmed.
        raise DeliveryError("the address is not confirmed yet", final=True)
    try:
        send_mail(
            subject=f"[Gantry] {delivery.payload.get('title', delivery.event)}",
            message=delivery.payload.get("text", delivery.message)
            + (f"\n\n{delivery.payload['url']}" if delivery.payload.get("url") else ""),
            from_email=None,
            recipient_list=[delivery.subscription.email],
        )
    except Exception as exc:  # smtplib's errors, refused connections, timeouts
        raise DeliveryError(f"mail not accepted: {exc}"[:300]) from exc
    return None
