"""Sign-ins and failed sign-ins go to the audit log."""

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from core import audit


@receiver(user_logged_in)
def record_login(sender, request, user, **kwargs):
    audit.record(user, "auth.login")


@receiver(user_login_failed)
def record_failed_login(sender, credentials, request=None, **kwargs):
    audit.record(None, "auth.login_failed", username=str(credentials.get("username", ""))[:150])
