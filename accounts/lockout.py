"""Sign-in lockout, kept by django-axes on every door that signs in with a password (the
sign-in page, the admin's, anything calling `authenticate(request, ...)`): who is counted,
what a locked-out client sees, and the audit event. Settings: AXES_* in config/settings/signin.py.
"""

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.dispatch import receiver
from django.shortcuts import render

USERNAME_MAX_LENGTH = 150
MESSAGE = "Too many failed sign-in attempts. Try again in {minutes} minutes."


def username(request, credentials) -> str:
    """Failures count per username whatever its case or surrounding spaces: "Olivia "
    is the same target as "olivia"."""
    raw = (credentials or {}).get("username") or request.POST.get("username") or ""
    # No username is longer (the User model's limit): a longer one is counted by its
    # first 150 characters, and fits axes' column (255) on every database.
    return str(raw).strip().lower()[:USERNAME_MAX_LENGTH]


def client_ip(request) -> str | None:
    """The client's address. Behind GANTRY_TRUSTED_PROXIES proxies (production: nginx or
    the Ingress) it is the one they added to X-Forwarded-For, counted from the right: what
    a client writes there itself is further left and never read."""
    hops = settings.GANTRY_TRUSTED_PROXIES
    if hops:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [a for a in forwarded if a]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR")


def lockout_response(request, original_response=None, credentials=None):
    """The sign-in page again, with why, answered 429 (the admin's door too)."""
    from accounts.oidc import login_button_context

    minutes = max(1, settings.GANTRY_LOGIN_LOCKOUT_SECONDS // 60)
    form = AuthenticationForm(request, initial={"username": username(request, credentials)})
    form.cleaned_data = {}  # an unbound form takes an error once it has (empty) data
    form.add_error(None, MESSAGE.format(minutes=minutes))
    context = {"form": form, "next": request.POST.get("next", ""), **login_button_context(request)}
    return render(request, "registration/login.html", context, status=429)


@receiver(user_locked_out)
def audit_lockout(sender, request, username, ip_address, **kwargs):
    from core import audit

    audit.record(None, "auth.login_locked_out", username=(username or "")[:150], door=request.path)
