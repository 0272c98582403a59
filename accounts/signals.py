"""Committed changes to API tokens and users make every cached token stale
(accounts.authentication.token_by_hash): a revoked token, a deactivated user or a
changed role must not keep working from the cache."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.dispatch import Signal, receiver

from accounts.models import ApiToken
from core import generations

# Sent (with `tenant` and `user`) when a service takes someone out of a tenant, before the
# membership row goes: apps above accounts drop what the user held in it (projects: roles).
member_removed = Signal()


def tokens_changed():
    if settings.GANTRY_ACCESS_CACHE:
        generations.changed("auth")


@receiver([post_save, post_delete], sender=ApiToken)
@receiver(post_delete, sender=get_user_model())
def token_or_user_changed(sender, **kwargs):
    tokens_changed()


@receiver(post_save, sender=get_user_model())
def user_saved(sender, update_fields=None, **kwargs):
    if update_fields is None or set(update_fields) != {"last_login"}:  # a sign-in alone changes nothing
        tokens_changed()
