from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling and quotas"

    def ready(self):
        # Jobs asks, at submit, whether a job of this shape could ever start, and the
        # Kubernetes backend asks a tenant's limits; jobs' task runs the admission pass.
        # The answers need quotas and the policy, which live here (jobs never imports
        # scheduling): declared in core.registry.
        from core import registry
        from scheduling import admission, tasks

        registry.never_runs.register(admission.never_runs)
        registry.tenant_limits.register(admission.tenant_limits)
        registry.admit_and_launch.register(tasks.admit_and_launch)
