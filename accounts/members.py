"""One mechanism for a user's role in a place, shared by tenant memberships (accounts) and
project members (projects).

Adding someone, changing their role and removing them are the same steps whatever the
place: the actor must hold the place's `manage` action, the role must be one of the kind's
roles, the row is locked and written, the user's cached roles are forgotten and an audit
event is recorded. What differs is a kind's own rule (a tenant always keeps an owner; a
project member belongs to the project's tenant), its `check_*` hooks.
"""

from django.core.exceptions import ValidationError
from django.db import models, transaction

from core import audit
from core.access import forget_roles, require


class MemberService:
    """The services of one kind of member row (`model`, an `accounts.models.Member`);
    `kind` names its matrix action (`<kind>.manage`) and its audit events (`<kind>.add`,
    `.change`, `.remove`)."""

    def __init__(self, model: type[models.Model], kind: str):
        self.model = model
        self.manage = f"{kind}.manage"
        self.audit_prefix = kind
        self.roles = [value for value, _ in model._meta.get_field("role").choices]

    def check_add(self, actor, place, user, role: str) -> None:
        """Raise ValidationError or PermissionDenied to refuse an addition."""

    def check_change(self, actor, member, old: str, new: str) -> None:
        """Raise ValidationError or PermissionDenied to refuse a role change."""

    def check_remove(self, actor, member) -> None:
        """Raise to refuse a removal; or clean up what the member held in the place."""

    def already_member(self, place, user) -> str:
        return f"{user.username} is already a member of {place}."

    def _check_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValidationError({"role": f"Unknown role “{role}”."})

    def grant(self, place, user, role: str):
        """The row that gives a place's creator their role (the create service checked and
        audits the creation itself)."""
        member = self.model.objects.create(**{self.model.place_field: place}, user=user, role=role)
        forget_roles(user)
        return member

    @transaction.atomic
    def add(self, *, actor, place, user, role: str):
        require(actor, self.manage, place)
        self._check_role(role)
        place_field = self.model.place_field
        if self.model.objects.filter(**{place_field: place}, user=user).exists():
            raise ValidationError({"user": self.already_member(place, user)})
        self.check_add(actor, place, user, role)
        member = self.model.objects.create(**{place_field: place}, user=user, role=role)
        forget_roles(user)
        audit.record(actor, f"{self.audit_prefix}.add", member, user=user.username, role=role)
        return member

    @transaction.atomic
    def change_role(self, *, actor, member, role: str):
        require(actor, self.manage, member.place)
        self._check_role(role)
        member = self.model.objects.select_for_update().get(pk=member.pk)
        old = member.role
        self.check_change(actor, member, old, role)
        member.role = role
        member.save(update_fields=["role"])
        forget_roles(member.user)
        audit.record(
            actor, f"{self.audit_prefix}.change", member, user=member.user.username, old=old, new=role
        )
        return member

    @transaction.atomic
    def remove(self, *, actor, member) -> None:
        require(actor, self.manage, member.place)
        member = self.model.objects.select_for_update().get(pk=member.pk)
        self.check_remove(actor, member)
        audit.record(actor, f"{self.audit_prefix}.remove", member, user=member.user.username)
        member.delete()
        forget_roles(member.user)
