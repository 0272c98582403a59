"""State changes for projects and their members."""

from django.core.exceptions import ValidationError
from django.db import transaction

from accounts.members import MemberService
from accounts.models import Membership
from core import audit, registry
from projects.models import Project, ProjectMember, ProjectRole
from projects.permissions import require


@transaction.atomic
def create_project(
    *, actor, tenant, name: str, slug: str, description: str = "", visibility: str = "tenant"
) -> Project:
    """Create a project; its creator becomes a maintainer of it."""
    require(actor, "project.create", tenant)
    if Project.objects.filter(tenant=tenant, slug=slug).exists():
        raise ValidationError(
            {"slug": f"{tenant.name} already has a project with the slug “{slug}”."}
        )
    project = Project(
        tenant=tenant,
        name=name,
        slug=slug,
        description=description,
        visibility=visibility,
        created_by=actor,
    )
    project.full_clean(validate_unique=False, validate_constraints=False)
    project.save()
    if Membership.objects.filter(tenant=tenant, user=actor).exists():
        PROJECT_MEMBERS.grant(project, actor, ProjectRole.MAINTAINER)
    audit.record(actor, "project.create", project)
    return project


@transaction.atomic
def update_project(*, actor, project: Project, **fields) -> Project:
    require(actor, "project.change", project)
    slug = fields.get("slug")
    if (
        slug
        and Project.objects.filter(tenant=project.tenant, slug=slug).exclude(pk=project.pk).exists()
    ):
        raise ValidationError(
            {"slug": f"{project.tenant.name} already has a project with the slug “{slug}”."}
        )
    for name in ("name", "slug", "description", "visibility"):
        if name in fields:
            setattr(project, name, fields[name])
    project.full_clean(validate_unique=False, validate_constraints=False)
    project.save()
    audit.record(actor, "project.change", project, fields=sorted(fields))
    return project


@transaction.atomic
def delete_project(*, actor, project: Project) -> None:
    """Delete a project and everything in it, in one transaction."""
    require(actor, "project.delete", project)
    audit.record(actor, "project.delete", project, name=project.name)
    registry.before_cascade(Project.objects.filter(pk=project.pk))
    project.delete()


class ProjectMembers(MemberService):
    def already_member(self, project, user):
        return f"{user.username} is already a member of this project."

    def check_add(self, actor, project, user, role):
        if not Membership.objects.filter(tenant=project.tenant, user=user).exists():
            raise ValidationError(
                {
                    "user": f"{user.username} is not a member of {project.tenant}; add them to the tenant first."
                }
            )


PROJECT_MEMBERS = ProjectMembers(ProjectMember, "projectmember")


def project_roles() -> list[str]:
    """The roles a project member may hold (an invitation offers them)."""
    return list(PROJECT_MEMBERS.roles)


def add_project_member(
    *, actor, project: Project, user, role: str = ProjectRole.VIEWER
) -> ProjectMember:
    return PROJECT_MEMBERS.add(actor=actor, place=project, user=user, role=role)

