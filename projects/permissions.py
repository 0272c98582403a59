"""The permission matrix: every action a user can take, and the least role allowed to take it.

Views, the API, templates (`{% can "project.change" project as allowed %}`) and
the generated access tests all read this one table. An action is scoped either
to a tenant (the role comes from the user's Membership) or to a project (the
role comes from ProjectMember, or is implied by the tenant role).

Tenant owners and admins act as maintainers in every project of their tenant;
a tenant member sees projects visible to the tenant as a viewer, and gets more
only through a ProjectMember row. Superusers (lab administrators) may do all.
"""

from typing import NamedTuple

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404

from accounts.models import Membership, TenantRole
from projects.models import ProjectMember, ProjectRole, Visibility

TENANT = "tenant"
PROJECT = "project"
# Not an entry of the matrix: views that need only a signed-in user (their querysets
# hold nothing but the user's own rows, e.g. API tokens) declare this instead.
AUTHENTICATED = "authenticated"

TENANT_RANK = {role: rank for rank, role in enumerate(TenantRole.values)}
PROJECT_RANK = {role: rank for rank, role in enumerate(ProjectRole.values)}


class Rule(NamedTuple):
    scope: str
    role: str


MATRIX: dict[str, Rule] = {
    # Tenant-scoped actions.
    "tenant.view": Rule(TENANT, TenantRole.MEMBER),
    "tenant.change": Rule(TENANT, TenantRole.ADMIN),
    "tenant.delete": Rule(TENANT, TenantRole.OWNER),
    "membership.view": Rule(TENANT, TenantRole.MEMBER),
    "membership.manage": Rule(TENANT, TenantRole.ADMIN),
    "project.create": Rule(TENANT, TenantRole.MEMBER),
    "quota.view": Rule(TENANT, TenantRole.MEMBER),
    "quota.change": Rule(TENANT, TenantRole.ADMIN),
    # Project-scoped actions.
    "project.view": Rule(PROJECT, ProjectRole.VIEWER),
    "project.change": Rule(PROJECT, ProjectRole.MAINTAINER),
    "project.delete": Rule(PROJECT, ProjectRole.MAINTAINER),
    "projectmember.view": Rule(PROJECT, ProjectRole.VIEWER),
    "projectmember.manage": Rule(PROJECT, ProjectRole.MAINTAINER),
    "job.view": Rule(PROJECT, ProjectRole.VIEWER),
    "job.submit": Rule(PROJECT, ProjectRole.DEVELOPER),
    "job.cancel": Rule(PROJECT, ProjectRole.DEVELOPER),
    "dataset.view": Rule(PROJECT, ProjectRole.VIEWER),
    "dataset.create": Rule(PROJECT, ProjectRole.DEVELOPER),
    "dataset.delete": Rule(PROJECT, ProjectRole.MAINTAINER),
    "model.view": Rule(PROJECT, ProjectRole.VIEWER),
    "model.register": Rule(PROJECT, ProjectRole.DEVELOPER),
    "model.alias": Rule(PROJECT, ProjectRole.MAINTAINER),
    "model.delete": Rule(PROJECT, ProjectRole.MAINTAINER),
    # Runtime images are tenant-scoped; public catalog images belong to no tenant (see can()).
    "image.view": Rule(TENANT, TenantRole.MEMBER),
    "image.create": Rule(TENANT, TenantRole.MEMBER),
    "image.change": Rule(TENANT, TenantRole.ADMIN),
    "image.delete": Rule(TENANT, TenantRole.ADMIN),
}


def tenant_roles_of(user) -> dict[int, str]:
    """{tenant id: role} of the user's memberships."""
    # Cached on the user object, which lives for one request.
    if not hasattr(user, "_gantry_tenant_roles"):
        user._gantry_tenant_roles = dict(
            Membership.objects.filter(user=user).values_list("tenant_id", "role")
        )
    return user._gantry_tenant_roles


def project_roles_of(user) -> dict[int, str]:
    """{project id: role} of the user's explicit project memberships."""
    if not hasattr(user, "_gantry_project_roles"):
        user._gantry_project_roles = dict(
            ProjectMember.objects.filter(user=user).values_list("project_id", "role")
        )
    return user._gantry_project_roles


def forget_roles(user) -> None:
    """Drop cached roles after a membership change in the same request."""
    for attr in ("_gantry_tenant_roles", "_gantry_project_roles"):
        if hasattr(user, attr):
            delattr(user, attr)


def tenant_role(user, tenant) -> str | None:
    if not user.is_authenticated:
        return None
    return tenant_roles_of(user).get(tenant.pk)


def project_role(user, project) -> str | None:
    if not user.is_authenticated:
        return None
    t_role = tenant_roles_of(user).get(project.tenant_id)
    if t_role is None:
        return None
    if t_role in (TenantRole.ADMIN, TenantRole.OWNER):
        return ProjectRole.MAINTAINER
    explicit = project_roles_of(user).get(project.pk)
    if explicit:
        return explicit
    if project.visibility == Visibility.TENANT:
        return ProjectRole.VIEWER
    return None


def _scope_object(obj, scope):
    """The tenant or project an object belongs to (every model exposes .tenant / .project)."""
    return obj.tenant if scope == TENANT else obj.project


def can(user, action: str, obj, token=None) -> bool:
    """May `user` take `action` on `obj`? `token` narrows what an API token may do."""
    rule = MATRIX[action]  # KeyError is a programming error: every action has a rule
    if not user.is_authenticated or not user.is_active:
        return False
    # Public catalog rows (the seeded runtime images) belong to no tenant: everyone
    # signed in may read them, only lab administrators (without a token) change them.
    if getattr(obj, "public_to_all_tenants", False):
        return is_read_action(action) or (user.is_superuser and token is None)
    if token is not None and not token_allows(token, action, obj):
        return False
    if user.is_superuser:
        return True
    target = _scope_object(obj, rule.scope)
    if rule.scope == TENANT:
        role = tenant_role(user, target)
        return role is not None and TENANT_RANK[role] >= TENANT_RANK[rule.role]
    role = project_role(user, target)
    return role is not None and PROJECT_RANK[role] >= PROJECT_RANK[rule.role]


def is_read_action(action: str) -> bool:
    return action.endswith(".view")


def token_allows(token, action: str, obj) -> bool:
    """Scoped tokens: read-only tokens only view; project tokens reach one project."""
    if token.scope == "read" and not is_read_action(action):
        return False
    if token.project_id is not None:
        rule = MATRIX[action]
        if rule.scope == PROJECT:
            return obj.project.pk == token.project_id
        # Tenant-level reads of the token's own tenant are fine; tenant changes are not.
        return is_read_action(action) and obj.tenant.pk == token.project.tenant_id
    return True


def require(user, action: str, obj, token=None) -> None:
    """Raise PermissionDenied unless the user may take the action (services call this)."""
    if not can(user, action, obj, token=token):
        raise PermissionDenied(f"You may not {action.replace('.', ' ')} here.")


def get_object_for_user(user, queryset, action: str, token=None, **lookup):
    """The one access point: 404 for what the user cannot see, 403 for what they cannot do."""
    if hasattr(queryset, "objects"):
        queryset = queryset.objects.all()
    obj = get_object_or_404(queryset.visible_to(user), **lookup)
    if not can(user, action, obj, token=token):
        if not can(user, MATRIX_VIEW_OF.get(action, action), obj, token=token):
            raise Http404
        raise PermissionDenied
    return obj


# The view action that goes with each action, used to tell 404 from 403.
MATRIX_VIEW_OF = {
    action: f"{action.split('.')[0]}.view"
    for action in MATRIX
    if f"{action.split('.')[0]}.view" in MATRIX
}
MATRIX_VIEW_OF.update({"project.create": "tenant.view", "membership.manage": "membership.view"})
