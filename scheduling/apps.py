from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling and quotas"

    def ready(self):
        # Jobs asks, at submit, whether a job of this shape could ever start, and the
        # Kubernetes backend asks a tenant's limits: the answers need quotas and the
        # policy, which live here (jobs never imports scheduling).
        from jobs.signals import submit_check, tenant_limits
        from scheduling.admission import never_runs_receiver, tenant_limits_receiver

        submit_check.connect(never_runs_receiver, dispatch_uid="scheduling.never_runs")
        tenant_limits.connect(tenant_limits_receiver, dispatch_uid="scheduling.tenant_limits")
