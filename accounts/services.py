"""State changes for users, tenants, memberships and API tokens."""

import logging
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.members import MemberService
from accounts.models import (
    ApiToken,
    Membership,
    Tenant,
    TenantRole,
    TokenScope,
)
from accounts.signals import member_removed
from core import audit, registry
from core.access import require, tenant_role

User = get_user_model()
logger = logging.getLogger(__name__)


@transaction.atomic
def create_tenant(
    *, actor, name: str, slug: str, description: str = "", creator_owns: bool = True
) -> Tenant:
    """Create a tenant; its creator becomes its owner (unless a lab administrator creates
    it for others: `creator_owns=False`)."""
    if not actor.is_authenticated or not (creator_owns or actor.is_superuser):
        raise PermissionDenied
    if Tenant.objects.filter(slug=slug).exists():
        raise ValidationError({"slug": f"A tenant with the slug “{slug}” already exists."})
    tenant = Tenant.objects.create(name=name, slug=slug, description=description)
    if creator_owns:
        TENANT_MEMBERS.grant(tenant, actor, TenantRole.OWNER)
    audit.record(actor, "tenant.create", tenant)
    return tenant


@transaction.atomic
def update_tenant(*, actor, tenant: Tenant, **fields) -> Tenant:
    require(actor, "tenant.change", tenant)
    if (
        "slug" in fields
        and Tenant.objects.exclude(pk=tenant.pk).filter(slug=fields["slug"]).exists()
    ):
        raise ValidationError(
            {"slug": f"A tenant with the slug “{fields['slug']}” already exists."}
        )
    for name in ("name", "slug", "description"):
        if name in fields:
            setattr(tenant, name, fields[name])
    tenant.full_clean()
    tenant.save()
    audit.record(actor, "tenant.change", tenant, fields=sorted(fields))
    return tenant


@transaction.atomic
def delete_tenant(*, actor, tenant: Tenant) -> None:
    """Delete a tenant and everything in it, in one transaction."""
    require(actor, "tenant.delete", tenant)
    audit.record(actor, "tenant.delete", tenant, tenant=None, name=tenant.name)
    registry.before_cascade(Tenant.objects.filter(pk=tenant.pk))
    tenant.delete()


def _guard_owner_change(actor, tenant, old_role, new_role):
    """Only owners grant or take away ownership, and a tenant always keeps an owner."""
    touches_owner = TenantRole.OWNER in (old_role, new_role)
    if touches_owner and not actor.is_superuser and tenant_role(actor, tenant) != TenantRole.OWNER:
        raise PermissionDenied("Only an owner can grant or remove the owner role.")
    if old_role == TenantRole.OWNER and new_role != TenantRole.OWNER:
        owners = Membership.objects.select_for_update().filter(tenant=tenant, role=TenantRole.OWNER)
        if owners.count() <= 1:
            raise ValidationError({"role": "A tenant must keep at least one owner."})


class TenantMembers(MemberService):
    def check_add(self, actor, tenant, user, role):
        _guard_owner_change(actor, tenant, None, role)

    def check_change(self, actor, membership, old, new):
        _guard_owner_change(actor, membership.tenant, old, new)

    def check_remove(self, actor, membership):
        _guard_owner_change(actor, membership.tenant, membership.role, None)
        # The roles held in the tenant's projects go with it (projects.signals).
        member_removed.send(Membership, tenant=membership.tenant, user=membership.user)


TENANT_MEMBERS = TenantMembers(Membership, "membership")




@transaction.atomic
def create_api_token(
    *,
    actor,
    name: str,
    scope: str = TokenScope.READ,
    project=None,
    expires_at: datetime | None = None,
    via: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Create a personal token. Returns the row and the secret, which is never stored.

    `via` is the API token the request came with, if any: the new token may be no wider
    than it. A read-only token creates none; a project-limited one only tokens limited
    to its project; one that expires only tokens that expire no later (by default with
    it). A sign-in (no token) may create any token of the user's.
    """
    if not actor.is_authenticated:
        raise PermissionDenied
    if scope not in TokenScope.values:
        raise ValidationError({"scope": f"Unknown scope “{scope}”."})
    if via is not None:
        if via.scope != TokenScope.WRITE:
            raise PermissionDenied("A read-only token cannot create tokens.")
        if via.project_id is not None and (project is None or project.pk != via.project_id):
            raise PermissionDenied(
                f"This token is limited to one project (id {via.project_id}): it may only "
                "create tokens limited to the same project."
            )
        if via.expires_at is not None:
            if expires_at is None:
                expires_at = via.expires_at
            elif expires_at > via.expires_at:
                raise PermissionDenied(
                    "This token expires at "
                    f"{via.expires_at.isoformat()}: it may only create tokens that expire no later."
                )
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    if project is not None:
        require(actor, "project.view", project)
    key = ApiToken.generate_key()
    token = ApiToken.objects.create(
        user=actor,
        name=name,
        scope=scope,
        project=project,
        expires_at=expires_at,
        key_prefix=key[: len(ApiToken.PREFIX) + 6],
        key_hash=ApiToken.hash_key(key),
    )
    audit.record(
        actor,
        "token.create",
        token,
        tenant=project.tenant if project else None,
        scope=scope,
        **({"via": via.key_prefix} if via is not None else {}),
    )
    return token, key


def set_default_project(*, actor, project=None):
    """Choose the project a bare MLflow experiment or model name means when the user's
    token or session reaches several (None: no default; such names are then refused)."""
    if not actor.is_authenticated:
        raise PermissionDenied
    if project is not None:
        require(actor, "project.view", project)
    actor.default_project = project
    actor.save(update_fields=["default_project"])
    return actor


@transaction.atomic
def revoke_api_token(*, actor, token: ApiToken) -> ApiToken:
    if token.user_id != actor.pk and not actor.is_superuser:
        raise PermissionDenied
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(actor, "token.revoke", token)
    return token


# --- Single sign-on ---------------------------------------------------------


@transaction.atomic
def sync_oidc_user(
    *, subject: str, username: str, email: str, first_name: str, last_name: str, groups
):
    """Create or update the user behind an OIDC sign-in and apply their groups as roles.

    Runs at every SSO sign-in. The user is found by the provider's `sub`; a local
    account with the same username is linked only when it has no password (an
    administrator created it ahead of the first sign-in) and no admin rights, so a
    provider account can never take over a local one. `groups` is the `groups` claim as
    the provider sent it; `core.registry.apply_sso_groups` (projects.sso.apply_groups)
    turns it into tenant and project roles. A user left in no tenant loses their API tokens.
    """
    user = User.objects.select_for_update().filter(oidc_subject=subject).first()
    if user is None:
        user = _link_or_create_oidc_user(subject, username)
    changed = []
    if user.username != username:
        if User.objects.filter(username=username).exclude(pk=user.pk).exists():
            logger.warning(
                "SSO: %s was renamed to %s in the provider, but that name is taken here",
                user.username,
                username,
            )
        else:
            user.username = username
            changed.append("username")
    for name, value in (("email", email), ("first_name", first_name), ("last_name", last_name)):
        if getattr(user, name) != value:
            setattr(user, name, value)
            changed.append(name)
    if changed:
        user.save(update_fields=changed)
    registry.apply_sso_groups(user, groups)
    if not user.is_superuser and not Membership.objects.filter(user=user).exists():
        revoke_all_api_tokens(user, reason="no tenant left after single sign-on")
    return user


def _link_or_create_oidc_user(subject: str, username: str):
    existing = User.objects.select_for_update().filter(username=username).first()
    if existing is None:
        user = User(username=username, oidc_subject=subject)
        user.set_unusable_password()
        user.save()
        audit.record(None, "user.create", user, source="oidc", username=username)
        return user
    if (
        existing.oidc_subject is None
        and not existing.has_usable_password()
        and not (existing.is_staff or existing.is_superuser)
    ):
        existing.oidc_subject = subject
        existing.save(update_fields=["oidc_subject"])
        audit.record(None, "user.link_sso", existing, source="oidc")
        return existing
    logger.warning("SSO: refused sign-in of %s: a different Gantry account has that name", username)
    raise PermissionDenied(
        f"A Gantry account named “{username}” already exists and is not linked to your "
        "single sign-on identity. Ask a lab administrator to resolve it."
    )


def revoke_all_api_tokens(user, *, reason: str) -> int:
    """Revoke every active token of a user who lost all access (each revocation audited)."""
    now = timezone.now()
    tokens = list(ApiToken.objects.active().filter(user=user))
    for token in tokens:
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
        audit.record(None, "token.revoke", token, user=user.username, reason=reason)
    return len(tokens)
