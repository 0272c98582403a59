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

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from django.shortcuts import get_object_or_404

from accounts.models import Membership, TenantRole
from core import generations
from core.access import AUTHENTICATED
from projects.models import ProjectMember, ProjectRole, Visibility

TENANT = "tenant"
PROJECT = "project"

TENANT_RANK = {role: rank for rank, role in enumerate(TenantRole.values)}
PROJECT_RANK = {role: rank for rank, role in enumerate(ProjectRole.values)}


class Rule(NamedTuple):
    scope: str
    role: str
    # The least role with which the object's creator (`created_by`) may take the action,
    # when lower than `role`: e.g. a job's submitter opens its notebook as a developer.
    creator_role: str | None = None


MATRIX: dict[str, Rule] = {
    # Tenant-scoped actions.
    "tenant.view": Rule(TENANT, TenantRole.MEMBER),
    "tenant.change": Rule(TENANT, TenantRole.ADMIN),
    "tenant.delete": Rule(TENANT, TenantRole.OWNER),
    "membership.view": Rule(TENANT, TenantRole.MEMBER),
    "membership.manage": Rule(TENANT, TenantRole.ADMIN),
    # Invitations carry people's addresses: owners and admins only, to see and to send.
    "invitation.view": Rule(TENANT, TenantRole.ADMIN),
    "invitation.manage": Rule(TENANT, TenantRole.ADMIN),
    "project.create": Rule(TENANT, TenantRole.MEMBER),
    "quota.view": Rule(TENANT, TenantRole.MEMBER),
    "quota.change": Rule(TENANT, TenantRole.ADMIN),
    # GPU usage reports (telemetry/): what each project and person used, for billing.
    "usage.view": Rule(TENANT, TenantRole.OWNER),
    # Project-scoped actions.
    "project.view": Rule(PROJECT, ProjectRole.VIEWER),
    "project.change": Rule(PROJECT, ProjectRole.MAINTAINER),
    "project.delete": Rule(PROJECT, ProjectRole.MAINTAINER),
    "projectmember.view": Rule(PROJECT, ProjectRole.VIEWER),
    "projectmember.manage": Rule(PROJECT, ProjectRole.MAINTAINER),
    "job.view": Rule(PROJECT, ProjectRole.VIEWER),
    "job.submit": Rule(PROJECT, ProjectRole.DEVELOPER),
    "job.cancel": Rule(PROJECT, ProjectRole.DEVELOPER),
    # Attach to a running job: its notebook, kernels, terminals (runs code as the job).
    # The submitter (while still a developer) and maintainers; never viewers.
    "job.exec": Rule(PROJECT, ProjectRole.MAINTAINER, creator_role=ProjectRole.DEVELOPER),
    "dataset.view": Rule(PROJECT, ProjectRole.VIEWER),
    "dataset.create": Rule(PROJECT, ProjectRole.DEVELOPER),
    "dataset.delete": Rule(PROJECT, ProjectRole.MAINTAINER),
    # Code snapshots (snapshots/): the files a job runs; developers upload them.
    "snapshot.view": Rule(PROJECT, ProjectRole.VIEWER),
    "snapshot.create": Rule(PROJECT, ProjectRole.DEVELOPER),
    # Checkpoints (checkpoints/): seen with the job; registering one or starting a job
    # from one are model.register and job.submit.
    "checkpoint.view": Rule(PROJECT, ProjectRole.VIEWER),
    "model.view": Rule(PROJECT, ProjectRole.VIEWER),
    "model.register": Rule(PROJECT, ProjectRole.DEVELOPER),
    "model.alias": Rule(PROJECT, ProjectRole.MAINTAINER),
    "model.delete": Rule(PROJECT, ProjectRole.MAINTAINER),
    # Experiment tracking (the MLflow API, tracking/): developers create experiments and
    # runs and log to them; deleting an experiment is its creator's or a maintainer's.
    "experiment.view": Rule(PROJECT, ProjectRole.VIEWER),
    "experiment.log": Rule(PROJECT, ProjectRole.DEVELOPER),
    "experiment.delete": Rule(PROJECT, ProjectRole.MAINTAINER, creator_role=ProjectRole.DEVELOPER),
    # A project's notification subscriptions (notifications/): their addresses may carry
    # secrets (a Slack hook's path), so only maintainers see and change them.
    "notification.view": Rule(PROJECT, ProjectRole.MAINTAINER),
    "notification.manage": Rule(PROJECT, ProjectRole.MAINTAINER),
    # Runtime images are tenant-scoped; public catalog images belong to no tenant (see can()).
    "image.view": Rule(TENANT, TenantRole.MEMBER),
    "image.create": Rule(TENANT, TenantRole.MEMBER),
    "image.change": Rule(TENANT, TenantRole.ADMIN),
    "image.delete": Rule(TENANT, TenantRole.ADMIN),
    # Hyperparameter sweeps (sweeps/): their trials are jobs, so the job roles apply.
    "sweep.view": Rule(PROJECT, ProjectRole.VIEWER),
    "sweep.create": Rule(PROJECT, ProjectRole.DEVELOPER),
    "sweep.stop": Rule(PROJECT, ProjectRole.DEVELOPER),
    # Model endpoints (endpoints/): viewers may call one (the gateway's endpoint.predict),
    # developers create, change and delete them and give out their tokens.
    "endpoint.view": Rule(PROJECT, ProjectRole.VIEWER),
    "endpoint.predict": Rule(PROJECT, ProjectRole.VIEWER),
    "endpoint.manage": Rule(PROJECT, ProjectRole.DEVELOPER),
}


class Access(NamedTuple):
    """What a user may reach: their tenant roles, explicit project roles and the ids of
    every project they may view. Read on nearly every request, changed rarely."""

    tenant_roles: dict[int, str]
    project_roles: dict[int, str]
    visible_projects: list[int]
    tenants: list[tuple[int, str]]  # (id, name) of their tenants, by name


# With a cache all processes share (Redis), a user's Access is kept there between
# requests, tagged with a generation that every committed change to memberships or
# projects moves on (projects.signals): a stale entry is never used, only replaced.
ACCESS_GENERATION = generations.key("access")
ACCESS_TTL = 600


def _access_key(user_id) -> str:
    # Entries are plain tuples of Access's fields; the "2" changes with those fields, so
    # a deployment never reads entries of another shape.
    return f"access:2:user:{user_id}"


def access_of(user) -> Access:
    """The user's Access: once per request (kept on the user object), from the shared
    cache when it is current, from the database otherwise (three small queries)."""
    access = getattr(user, "_gantry_access", None)
    if access is not None:
        return access
    shared = settings.GANTRY_ACCESS_CACHE
    if shared:
        current, found = generations.read(["access"], _access_key(user.pk))
        entry = found.get(_access_key(user.pk))
        if entry is not None and entry[0] == current[0]:
            user._gantry_access = Access(*entry[1])
            return user._gantry_access
    access = _read_access(user)
    if shared and generations.storable(current):
        cache.set(_access_key(user.pk), (current[0], tuple(access)), ACCESS_TTL)
    user._gantry_access = access
    return access


def _read_access(user) -> Access:
    from projects.models import Project

    memberships = Membership.objects.filter(user=user).values_list("tenant_id", "role", "tenant__name")
    tenant_roles = {tenant: role for tenant, role, _ in memberships}
    project_roles = dict(
        ProjectMember.objects.filter(user=user).values_list("project_id", "role")
    )
    admin_of = [t for t, role in tenant_roles.items() if role in (TenantRole.ADMIN, TenantRole.OWNER)]
    visible = Project.objects.filter(
        Q(tenant_id__in=admin_of)
        | Q(tenant_id__in=list(tenant_roles), visibility=Visibility.TENANT)
        | Q(tenant_id__in=list(tenant_roles), pk__in=list(project_roles))
    )
    return Access(
        tenant_roles,
        project_roles,
        sorted(visible.values_list("pk", flat=True)),
        sorted(((tenant, name) for tenant, _, name in memberships), key=lambda t: t[1]),
    )


def access_changed() -> None:
    """Every cached Access becomes stale once the current transaction commits (now,
    outside one). Called by the signals of the models it reads."""
    if settings.GANTRY_ACCESS_CACHE:
        generations.changed("access")


def tenant_roles_of(user) -> dict[int, str]:
    """{tenant id: role} of the user's memberships."""
    return access_of(user).tenant_roles


def project_roles_of(user) -> dict[int, str]:
    """{project id: role} of the user's explicit project memberships."""
    return access_of(user).project_roles


def visible_project_ids(user) -> list[int]:
    """Ids of the projects the user may at least view (not for superusers: they see all)."""
    return access_of(user).visible_projects


def forget_roles(user) -> None:
    """Drop the request's Access after a membership change in the same request."""
    if hasattr(user, "_gantry_access"):
        del user._gantry_access


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
    least = rule.role
    if rule.creator_role is not None and getattr(obj, "created_by_id", None) == user.pk:
        least = rule.creator_role
    return role is not None and PROJECT_RANK[role] >= PROJECT_RANK[least]


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


def token_of(request):
    """The personal API token a request came with (`request.auth`), or None: a browser
    session, an SSO bearer token (its claims) and no authentication carry no token."""
    from accounts.models import ApiToken

    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiToken) else None


def restrict(queryset, user, action: str, token=None, *, field: str | None = None):
    """The rows of `queryset` that `user` may reach for `action`, narrowed to what `token`
    reaches when the request came with one (NetBox's `RestrictedQuerySet.restrict`).

    Every list, HTML and API, and every API object lookup starts here: first
    `visible_to(user)`, then, with a token, the same narrowing `token_allows` applies to
    one object: a read-only token reaches nothing for a write, and a project-limited
    token only its project's rows (project-scoped actions) or its project's tenant's rows
    (tenant-scoped reads; tenant-scoped writes reach nothing). `field` is the lookup from
    a row to its project (or tenant, for tenant-scoped actions), by default `project` /
    `tenant`, or the row itself for Project and Tenant. For AUTHENTICATED (the user's own
    rows: their tokens), a project-limited token reaches the rows of its project.
    """
    from accounts.models import Tenant
    from projects.models import Project

    queryset = queryset.visible_to(user)
    if token is None:
        return queryset
    if action != AUTHENTICATED and token.scope == "read" and not is_read_action(action):
        return queryset.none()
    if token.project_id is None:
        return queryset
    model = queryset.model
    if action == AUTHENTICATED or MATRIX[action].scope == PROJECT:
        target, target_id = Project, token.project_id
    elif not is_read_action(action):
        return queryset.none()
    else:
        target, target_id = Tenant, token.project.tenant_id
    if field is None:
        field = "pk" if model is target else target.__name__.lower()
    lookup = field if field == "pk" or field.endswith("_id") else f"{field}_id"
    return queryset.filter(**{lookup: target_id})


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


def view_action_of(action: str) -> str:
    """The view action that goes with `action` (core.access asks it), or `action` itself."""
    return MATRIX_VIEW_OF.get(action, action)
