"""Who may do what, as core's base views, API classes and template tags ask it.

core sits below every app, so it cannot import the permission matrix: the app that owns
the matrix provides it, named by `GANTRY_ACCESS_POLICY` (projects.permissions), as
`AUTHENTICATION_BACKENDS` name Django's authentication backends. The policy is a module
(or any object) with `can`, `require`, `restrict`, `get_object_for_user`, `token_of`,
`view_action_of`, `tenant_role` and `forget_roles`; the functions here hand each
question to it unchanged.
"""

import functools
from importlib import import_module

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Not an action of the matrix: views that need only a signed-in user (their querysets
# hold nothing but the user's own rows, e.g. API tokens) declare this instead.
AUTHENTICATED = "authenticated"


@functools.cache
def policy():
    """The module that holds the permission matrix (`GANTRY_ACCESS_POLICY`)."""
    name = getattr(settings, "GANTRY_ACCESS_POLICY", "")
    if not name:
        raise ImproperlyConfigured(
            "GANTRY_ACCESS_POLICY must name the module that holds the permission matrix, "
            "e.g. 'projects.permissions'."
        )
    return import_module(name)


def can(user, action: str, obj, token=None) -> bool:
    """May `user` take `action` on `obj`? `token` narrows what an API token may do."""
    return policy().can(user, action, obj, token=token)


def require(user, action: str, obj, token=None) -> None:
    """Raise PermissionDenied unless the user may take the action (services call this)."""
    policy().require(user, action, obj, token=token)


def restrict(queryset, user, action: str, token=None, *, field: str | None = None):
    """The rows of `queryset` that `user` (with `token`) may reach for `action`."""
    return policy().restrict(queryset, user, action, token, field=field)


def get_object_for_user(user, queryset, action: str, token=None, **lookup):
    """The one access point: 404 for what the user cannot see, 403 for what they cannot do."""
    return policy().get_object_for_user(user, queryset, action, token, **lookup)


def token_of(request):
    """The personal API token a request came with, or None."""
    return policy().token_of(request)


def view_action_of(action: str) -> str:
    """The view action that goes with `action` (to tell 404 from 403), or `action` itself."""
    return policy().view_action_of(action)


def tenant_role(user, tenant) -> str | None:
    """The user's role in the tenant, or None."""
    return policy().tenant_role(user, tenant)


def forget_roles(user) -> None:
    """Drop what the request knows of the user's roles after a membership change."""
    policy().forget_roles(user)
