"""Invitations: a tenant admin invites someone by email address with a role; the emailed
link creates their account (or links the account they are signed in with, local or single
sign-on, whose email must be the invited address) and grants the role, once.

The link carries a random secret of 256 bits; the database keeps only its SHA-256, so a
copy of the table accepts nothing and a changed link matches no row. Every refusal
(unknown, tampered, expired, revoked or used link; an account of another address; a
username taken; a weak password; an inviter who may no longer add members) is an
`InvitationError` or a ValidationError raised before anything is written, inside one
transaction, so it changes nothing.
"""

import hashlib
import secrets
import smtplib
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts.models import Invitation, Membership, Tenant, TenantRole
from accounts.services import TENANT_MEMBERS
from core import audit, registry
from core.access import can, require

User = get_user_model()

# The roles an invitation may carry: ownership is handed over by an owner, in Gantry.
INVITABLE_ROLES = [TenantRole.MEMBER, TenantRole.ADMIN]
MAX_DAYS = 90


class InvitationError(Exception):
    """A link that cannot be accepted; `status` is the HTTP answer a page gives it."""

    def __init__(self, message: str, status: int = 410):
        super().__init__(message)
        self.message = message
        self.status = status


def project_roles() -> list[str]:
    """The project roles an invitation may grant (projects answers: core.registry)."""
    return registry.project_roles()


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def accept_path(key: str) -> str:
    return reverse("accounts:invitation_accept", args=[key])


@transaction.atomic
def invite(
    *,
    actor,
    tenant: Tenant,
    email: str,
    role: str = TenantRole.MEMBER,
    project=None,
    project_role: str = "",
    days: int | None = None,
    base_url: str | None = None,
) -> Invitation:
    """Invite `email` to `tenant` with `role` (and `project_role` in `project`), and email
    the link. `base_url` is the address the invitee opens (the request's, by default
    GANTRY_URL). A failure to send rolls the invitation back. The returned invitation
    carries the link in `accept_url` (only now: the database keeps its hash)."""
    require(actor, "invitation.manage", tenant)
    email = (email or "").strip()
    try:
        validate_email(email)
    except ValidationError:
        raise ValidationError({"email": f"“{email}” is not an email address."}) from None
    if role not in INVITABLE_ROLES:
        raise ValidationError({"role": f"An invitation grants member or admin, not “{role}”."})
    days = settings.GANTRY_INVITATION_DAYS if days is None else days
    if not 1 <= days <= MAX_DAYS:
        raise ValidationError({"days": f"An invitation lasts 1 to {MAX_DAYS} days, not {days}."})
    _check_project(actor, tenant, project, project_role)
    if Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
        raise ValidationError({"email": f"{email} is already a member of {tenant}."})
    if Invitation.objects.pending().filter(tenant=tenant, email__iexact=email).exists():
        raise ValidationError(
            {"email": f"{email} already has a pending invitation to {tenant}; revoke it first."}
        )
    key = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        role=role,
        project=project,
        project_role=project_role if project is not None else "",
        invited_by=actor,
        key_hash=hash_key(key),
        expires_at=timezone.now() + timedelta(days=days),
    )
    audit.record(
        actor,
        "invitation.create",
        invitation,
        email=email,
        role=role,
        **({"project": project.slug, "project_role": project_role} if project else {}),
    )
    invitation.accept_url = (base_url or settings.GANTRY_URL).rstrip("/") + accept_path(key)
    _send(invitation, invitation.accept_url, actor)
    return invitation


def _check_project(actor, tenant, project, project_role):
    if project is None:
        if project_role:
            raise ValidationError({"project": "Pick the project the project role is for."})
        return
    if project.tenant_id != tenant.pk:
        raise ValidationError({"project": f"{project} is not a project of {tenant}."})
    if project_role not in project_roles():
        raise ValidationError(
            {"project_role": f"Pick a project role: {', '.join(project_roles())}."}
        )
    require(actor, "projectmember.manage", project)


def _send(invitation: Invitation, link: str, actor) -> None:
    inviter = actor.get_full_name() or actor.username
    grants = f"{invitation.get_role_display().lower()} of {invitation.tenant}"
    if invitation.project is not None:
        grants += f", {invitation.project_role} in the project {invitation.project}"
    body = (
        f"{inviter} invites you to Gantry as {grants}.\n\n"
        f"Open this link to create your account, or to join with the account you have:\n"
        f"{link}\n\n"
        f"The link works once, until {invitation.expires_at:%Y-%m-%d %H:%M} UTC.\n"
        "If you did not expect it, ignore this message.\n"
    )
    try:
        send_mail(
            f"Invitation to {invitation.tenant} on Gantry",
            body,
            settings.DEFAULT_FROM_EMAIL,
            [invitation.email],
        )
    except (OSError, smtplib.SMTPException) as exc:
        raise ValidationError(
            {"email": f"The invitation could not be sent ({exc}); nothing was saved."}
        ) from exc


@transaction.atomic
def revoke_invitation(*, actor, invitation: Invitation) -> Invitation:
    require(actor, "invitation.manage", invitation.tenant)
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    if invitation.accepted_at is not None:
        raise ValidationError(
            "This invitation was already accepted; remove the member from the tenant instead."
        )
    if invitation.revoked_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit.record(actor, "invitation.revoke", invitation, email=invitation.email)
    return invitation


def find_invitation(key: str, *, for_update: bool = False) -> Invitation:
    """The invitation a link's secret opens, or InvitationError saying why not."""
    rows = Invitation.objects.select_related("tenant", "project", "invited_by")
    if for_update:
        rows = rows.select_for_update(of=("self",))
    invitation = rows.filter(key_hash=hash_key(key or "")).first()
    if invitation is None:
        raise InvitationError(
            "This invitation link is not valid. Check that it was copied whole, or ask for "
            "a new invitation.",
            status=404,
        )
    if invitation.accepted_at is not None:
        raise InvitationError(
            "This invitation was already used. Sign in with the account that accepted it."
        )
    if invitation.revoked_at is not None:
        raise InvitationError(
            "This invitation was withdrawn. Ask an admin of the tenant for a new one."
        )
    if invitation.expires_at <= timezone.now():
        raise InvitationError(
            f"This invitation expired on {invitation.expires_at:%Y-%m-%d %H:%M} UTC. Ask an "
            "admin of the tenant for a new one."
        )
    return invitation


def check_account(invitation: Invitation, user) -> None:
    """An invitation joins the account of the address it was sent to (any letter case): a
    forwarded or leaked link must not let another account in."""
    if (user.email or "").strip().casefold() != invitation.email.strip().casefold():
        raise InvitationError(
            f"This invitation is for {invitation.email}, and you are signed in as "
            f"{user.username} ({user.email or 'no email address'}). Sign out, then sign in "
            f"with the account of {invitation.email}, or open the link signed out to create "
            "one.",
            status=403,
        )


@transaction.atomic
def accept_invitation(
    *, key: str, user=None, username: str = "", password: str = ""
) -> tuple[Invitation, object]:
    """Accept the invitation behind `key`: as `user` (signed in, a local or single sign-on
    account: it is linked) or by creating the account `username` with `password` (Django's
    password validators apply). The roles are granted in the inviter's name, who must still
    be allowed to add members. Returns the invitation and the user."""
    invitation = find_invitation(key, for_update=True)
    inviter = invitation.invited_by
    if inviter is None or not can(inviter, "invitation.manage", invitation.tenant):
        raise InvitationError(
            "The person who invited you can no longer add members to "
            f"{invitation.tenant}. Ask an admin of the tenant for a new invitation."
        )
    if user is None:
        user = _create_user(username, password, invitation.email)
        created = True
    else:
        if not user.is_authenticated or not user.is_active:
            raise PermissionDenied
        if Membership.objects.filter(tenant=invitation.tenant, user=user).exists():
            raise InvitationError(
                f"You ({user.username}) are already a member of {invitation.tenant}.", status=400
            )
        check_account(invitation, user)
        created = False
    TENANT_MEMBERS.add(actor=inviter, place=invitation.tenant, user=user, role=invitation.role)
    if invitation.project is not None and invitation.project_role:
        registry.add_project_member(
            actor=inviter, project=invitation.project, user=user, role=invitation.project_role
        )
    # Conditional, so two acceptances racing on a database without row locks (SQLite)
    # cannot both count: the second finds the row taken and rolls back.
    now = timezone.now()
    taken = Invitation.objects.filter(pk=invitation.pk, accepted_at__isnull=True).update(
        accepted_at=now, accepted_by=user
    )
    if not taken:
        raise InvitationError("This invitation was already used.")
    invitation.accepted_at, invitation.accepted_by = now, user
    audit.record(
        user,
        "invitation.accept",
        invitation,
        email=invitation.email,
        username=user.username,
        account="created" if created else "linked",
    )
    return invitation, user


def _create_user(username: str, password: str, email: str):
    username = (username or "").strip()
    candidate = User(username=username, email=email)
    try:
        User._meta.get_field("username").run_validators(username)
    except ValidationError as exc:
        raise ValidationError({"username": exc.messages}) from None
    if not username:
        raise ValidationError({"username": "Choose a username."})
    if User.objects.filter(username__iexact=username).exists():
        raise ValidationError({"username": f"The username “{username}” is taken; choose another."})
    try:
        validate_password(password, user=candidate)
    except ValidationError as exc:
        raise ValidationError({"password1": exc.messages}) from None
    candidate.set_password(password)
    candidate.save()
    audit.record(None, "user.create", candidate, source="invitation", username=username)
    return candidate
