"""Committed changes to who may reach what make every cached Access stale
(projects.permissions.access_of). Deletes cascade through these models' own signals.
Someone taken out of a tenant loses their roles in its projects."""

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from accounts.models import Membership, Tenant
from accounts.signals import member_removed
from projects.models import Project, ProjectMember
from projects.permissions import access_changed


@receiver([post_save, post_delete], sender=Tenant)  # names, for the tenant switcher
@receiver([post_save, post_delete], sender=Membership)
@receiver([post_save, post_delete], sender=Project)
@receiver([post_save, post_delete], sender=ProjectMember)
def membership_or_project_changed(sender, **kwargs):
    access_changed()


@receiver(member_removed)
def drop_project_roles(sender, tenant, user, **kwargs):
    ProjectMember.objects.filter(project__tenant=tenant, user=user).delete()
