"""State changes for users, tenants, memberships and API tokens."""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken, Membership, Tenant, TenantRole, TokenScope
from core import audit
from projects.permissions import forget_roles, require, tenant_role

User = get_user_model()


@transaction.atomic
def create_tenant(*, actor, name: str, slug: str, description: str = "") -> Tenant:
    """Create a tenant; its creator becomes its owner."""
    if not actor.is_authenticated:
        raise PermissionDenied
    if Tenant.objects.filter(slug=slug).exists():
        raise ValidationError({"slug": f"A tenant with the slug “{slug}” already exists."})
    tenant = Tenant.objects.create(name=name, slug=slug, description=description)
    Membership.objects.create(tenant=tenant, user=actor, role=TenantRole.OWNER)
    forget_roles(actor)
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


@transaction.atomic
def add_member(*, actor, tenant: Tenant, user, role: str = TenantRole.MEMBER) -> Membership:
    require(actor, "membership.manage", tenant)
    if role not in TenantRole.values:
        raise ValidationError({"role": f"Unknown role “{role}”."})
    if Membership.objects.filter(tenant=tenant, user=user).exists():
        raise ValidationError({"user": f"{user.username} is already a member of {tenant}."})
    _guard_owner_change(actor, tenant, None, role)
    membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    forget_roles(user)
    audit.record(actor, "membership.add", membership, user=user.username, role=role)
    return membership


@transaction.atomic
def change_member_role(*, actor, membership: Membership, role: str) -> Membership:
    require(actor, "membership.manage", membership.tenant)
    if role not in TenantRole.values:
        raise ValidationError({"role": f"Unknown role “{role}”."})
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    old = membership.role
    _guard_owner_change(actor, membership.tenant, old, role)
    membership.role = role
    membership.save(update_fields=["role"])
    forget_roles(membership.user)
    audit.record(
        actor, "membership.change", membership, user=membership.user.username, old=old, new=role
    )
    return membership


@transaction.atomic
def remove_member(*, actor, membership: Membership) -> None:
    """Remove someone from a tenant, with their roles in its projects."""
    from projects.models import ProjectMember

    require(actor, "membership.manage", membership.tenant)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    _guard_owner_change(actor, membership.tenant, membership.role, None)
    ProjectMember.objects.filter(project__tenant=membership.tenant, user=membership.user).delete()
    audit.record(actor, "membership.remove", membership, user=membership.user.username)
    membership.delete()
    forget_roles(membership.user)


@transaction.atomic
def create_api_token(
    *,
    actor,
    name: str,
    scope: str = TokenScope.READ,
    project=None,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create a personal token. Returns the row and the secret, which is never stored."""
    if not actor.is_authenticated:
        raise PermissionDenied
    if scope not in TokenScope.values:
        raise ValidationError({"scope": f"Unknown scope “{scope}”."})
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
        actor, "token.create", token, tenant=project.tenant if project else None, scope=scope
    )
    return token, key


@transaction.atomic
def revoke_api_token(*, actor, token: ApiToken) -> ApiToken:
    if token.user_id != actor.pk and not actor.is_superuser:
        raise PermissionDenied
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(actor, "token.revoke", token)
    return token
