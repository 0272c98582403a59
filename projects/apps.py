from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "projects"

    def ready(self):
        from core import registry
        from projects import permissions, services, signals, sso  # noqa: F401 - signals connect

        # Apps below projects ask the permission matrix (core.access) and, from accounts,
        # for SSO group roles and an invitation's project role (core.registry).
        registry.can.register(permissions.can)
        registry.require.register(permissions.require)
        registry.restrict.register(permissions.restrict)
        registry.get_object_for_user.register(permissions.get_object_for_user)
        registry.token_of.register(permissions.token_of)
        registry.view_action_of.register(permissions.view_action_of)
        registry.tenant_role.register(permissions.tenant_role)
        registry.forget_roles.register(permissions.forget_roles)
        registry.apply_sso_groups.register(sso.apply_groups)
        registry.project_roles.register(services.project_roles)
        registry.add_project_member.register(services.add_project_member)
