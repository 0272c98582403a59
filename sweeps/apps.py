from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SweepsConfig(AppConfig):
    name = "sweeps"
    verbose_name = "Sweeps"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from jobs import signals
        from sweeps import tasks

        post_migrate.connect(tasks.register_schedules, sender=self)
        # A trial's job changed state, or reported metrics: the sweep's controller looks
        # at it now rather than at the next minute's pass.
        signals.job_transitioned.connect(tasks.on_job_transitioned, dispatch_uid="sweeps-trial-state")
        signals.metrics_reported.connect(tasks.on_metrics_reported, dispatch_uid="sweeps-trial-metrics")
