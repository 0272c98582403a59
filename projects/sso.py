"""Single sign-on groups become tenant and project roles.

accounts signs the user in (accounts.oidc) and asks `core.registry.apply_sso_groups` to
apply the `groups` claim: `apply_groups` here answers (projects/apps.py), since project
roles are projects' business and accounts sits below projects. Each step is a function of its own:
read the claim by the configured patterns, find the tenants and projects it names, then
make the user's SSO-sourced memberships match; memberships granted in Gantry are never
touched.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from django.conf import settings

from accounts.models import Membership, MembershipSource, Tenant, TenantRole
from core import audit
from projects.models import Project, ProjectMember, ProjectRole
from projects.permissions import forget_roles

logger = logging.getLogger(__name__)

_PLACEHOLDERS = {
    "tenant": r"(?P<tenant>[^/]+)",
    "project": r"(?P<project>[^/]+)",
    "role": r"(?P<role>[^/]+)",
}
TENANT_RANK = {role: rank for rank, role in enumerate(TenantRole.values)}
PROJECT_RANK = {role: rank for rank, role in enumerate(ProjectRole.values)}


def compile_group_pattern(pattern: str, required: tuple[str, ...]) -> re.Pattern:
    """`/labs/{tenant}/{role}` -> a regular expression; each placeholder stands for one path segment."""
    missing = [name for name in required if "{" + name + "}" not in pattern]
    if missing:
        raise ValueError(f"must contain {', '.join('{' + m + '}' for m in missing)}")
    regex = re.escape(pattern.strip("/"))
    for name, group in _PLACEHOLDERS.items():
        regex = regex.replace(re.escape("{" + name + "}"), group, 1)
    return re.compile(regex)


@dataclass
class GroupGrants:
    """What a `groups` claim asks for, before it meets the database."""

    tenants: dict[str, str] = field(default_factory=dict)  # tenant slug -> tenant role
    projects: dict[tuple[str, str], str] = field(default_factory=dict)  # (tenant, project) -> role
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (group, why)

    def grant(self, place, role: str, group: str, ranks: dict[str, int], what: str) -> None:
        """Ask for `role` at `place` (a tenant slug or a (tenant, project) pair); the
        highest role asked for a place wins."""
        grants = self.tenants if what == "tenant" else self.projects
        if role not in ranks:
            self.ignored.append((group, f"unknown {what} role {role!r}"))
        elif place not in grants or ranks[role] > ranks[grants[place]]:
            grants[place] = role


def _claim_as_list(groups, grants: GroupGrants) -> list:
    """The claim as a list of groups; anything but a list (or one string) is ignored."""
    if groups is None:
        return []
    if isinstance(groups, str):
        return [groups]
    if not isinstance(groups, list):
        grants.ignored.append((repr(groups)[:100], "the groups claim is not a list"))
        return []
    return groups


def parse_groups(groups) -> GroupGrants:
    """Read the `groups` claim by the configured patterns; the highest role per place wins."""
    tenant_re = compile_group_pattern(settings.GANTRY_OIDC_TENANT_GROUP_PATTERN, ("tenant", "role"))
    project_re = compile_group_pattern(
        settings.GANTRY_OIDC_PROJECT_GROUP_PATTERN, ("tenant", "project", "role")
    )
    grants = GroupGrants()
    for group in _claim_as_list(groups, grants):
        if not isinstance(group, str):
            grants.ignored.append((repr(group)[:100], "not a string"))
            continue
        path = group.strip("/")
        if match := project_re.fullmatch(path):
            place = (match["tenant"], match["project"])
            grants.grant(place, match["role"], group, PROJECT_RANK, "project")
        elif match := tenant_re.fullmatch(path):
            grants.grant(match["tenant"], match["role"], group, TENANT_RANK, "tenant")
        # Groups that match neither pattern are the provider's business, not ours.
    return grants


# --- From grants to rows -------------------------------------------------------


def named_tenants(user, grants: GroupGrants) -> dict[str, Tenant]:
    """{slug: tenant} of the tenants the grants name; unknown slugs are logged."""
    slugs = set(grants.tenants) | {tenant for tenant, _ in grants.projects}
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=slugs)}
    for slug in sorted(slugs - set(tenants)):
        logger.warning("SSO: ignored groups of %s naming unknown tenant %r", user.username, slug)
    return tenants


def wanted_projects(user, grants: GroupGrants, tenants: dict[str, Tenant]) -> dict:
    """{project id: (project, role)} the grants ask for in known tenants; unknown
    projects are logged."""
    projects = {
        (p.tenant.slug, p.slug): p
        for p in Project.objects.filter(tenant__slug__in=tenants).select_related("tenant")
    }
    wanted = {}
    for key, role in grants.projects.items():
        if key[0] not in tenants:
            continue
        if key not in projects:
            logger.warning(
                "SSO: ignored group of %s naming unknown project %s/%s", user.username, *key
            )
            continue
        wanted[projects[key].pk] = (projects[key], role)
    return wanted


def wanted_tenants(grants: GroupGrants, tenants: dict[str, Tenant], projects: dict) -> dict:
    """{tenant id: (tenant, role)}: the tenant roles asked for, and membership of every
    tenant a project role is asked in (a project role needs a place in its tenant)."""
    wanted = {
        tenants[slug].pk: (tenants[slug], role)
        for slug, role in grants.tenants.items()
        if slug in tenants
    }
    for project, _ in projects.values():
        wanted.setdefault(project.tenant_id, (project.tenant, TenantRole.MEMBER))
    return wanted


def sync_memberships(user, wanted: dict) -> dict[int, Membership]:
    """Grant and change the user's tenant roles to `wanted`, and drop the SSO-sourced
    memberships it no longer names. Returns the memberships the user keeps."""
    memberships = {
        m.tenant_id: m
        for m in Membership.objects.select_for_update().filter(user=user).select_related("tenant")
    }
    for tenant_id, (tenant, role) in wanted.items():
        memberships[tenant_id] = grant_role(
            user, memberships.get(tenant_id), Membership, tenant, role
        )
    for tenant_id, membership in list(memberships.items()):
        if membership.source == MembershipSource.OIDC and tenant_id not in wanted:
            drop_membership(user, membership)
            del memberships[tenant_id]
    return memberships


def grant_role(user, row, model, place, role: str):
    """A new SSO-sourced member row (`model`: Membership or ProjectMember) giving `user`
    `role` in `place`, or an SSO row's new role; a row granted in Gantry stays as it is."""
    kind = model._meta.model_name
    if row is None:
        row = model.objects.create(
            **{model.place_field: place}, user=user, role=role, source=MembershipSource.OIDC
        )
        audit.record(None, f"{kind}.add", row, user=user.username, role=role, source="oidc")
    elif row.source == MembershipSource.OIDC and row.role != role:
        old, row.role = row.role, role
        row.save(update_fields=["role"])
        audit.record(
            None, f"{kind}.change", row, user=user.username, old=old, new=role, source="oidc"
        )
    return row


def drop_membership(user, membership: Membership) -> None:
    """The provider took the user out of a tenant: their roles in its projects go too."""
    if membership.role == TenantRole.OWNER and not (
        Membership.objects.filter(tenant_id=membership.tenant_id, role=TenantRole.OWNER)
        .exclude(pk=membership.pk)
        .exists()
    ):
        # The provider is the authority: access goes, even if the tenant loses its last owner.
        logger.warning("SSO: %s left %s, which now has no owner", user.username, membership.tenant)
    ProjectMember.objects.filter(project__tenant_id=membership.tenant_id, user=user).delete()
    audit.record(None, "membership.remove", membership, user=user.username, source="oidc")
    membership.delete()


def sync_project_members(user, wanted: dict) -> None:
    """Grant and change the user's SSO-sourced project roles to `wanted`, and drop those it
    no longer names; project roles granted in Gantry stay."""
    members = {
        pm.project_id: pm
        for pm in ProjectMember.objects.select_for_update()
        .filter(user=user)
        .select_related("project__tenant")
    }
    for project_id, (project, role) in wanted.items():
        grant_role(user, members.get(project_id), ProjectMember, project, role)
    for project_id, member in members.items():
        if member.source == MembershipSource.OIDC and project_id not in wanted:
            audit.record(None, "projectmember.remove", member, user=user.username, source="oidc")
            member.delete()


def apply_groups(user, groups) -> None:
    """Make the user's SSO-sourced memberships match the `groups` claim (at every SSO
    sign-in, inside its transaction: `core.registry.apply_sso_groups`)."""
    grants = parse_groups(groups)
    for group, why in grants.ignored:
        logger.warning("SSO: ignored group %r of %s: %s", group, user.username, why)
    tenants = named_tenants(user, grants)
    projects = wanted_projects(user, grants, tenants)
    sync_memberships(user, wanted_tenants(grants, tenants, projects))
    sync_project_members(user, projects)
    forget_roles(user)
