"""Who may do what, as core's base views, API classes and template tags ask it.

core sits below every app, so it cannot import the permission matrix: the questions are
declared in `core.registry` (`can`, `require`, `restrict`, `get_object_for_user`,
`token_of`, `view_action_of`, `tenant_role`, `forget_roles`) and projects, which holds the
matrix, registers its answers (projects/apps.py). Code below projects imports them from
here, by the names it has always used.
"""

from core.registry import (  # noqa: F401 - the access API core and the apps below projects use
    can,
    forget_roles,
    get_object_for_user,
    require,
    restrict,
    tenant_role,
    token_of,
    view_action_of,
)

# Not an action of the matrix: views that need only a signed-in user (their querysets
# hold nothing but the user's own rows, e.g. API tokens) declare this instead.
AUTHENTICATED = "authenticated"
