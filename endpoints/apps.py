from django.apps import AppConfig


class EndpointsConfig(AppConfig):
    name = "endpoints"
    verbose_name = "Model endpoints"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from core import registry
        from endpoints import services, usage

        # The cluster page (scheduling, below endpoints) lists what endpoints hold; jobs'
        # holdings and scheduling's admission count it in tenants' quotas.
        registry.serving_replicas.register(services.serving_replicas)
        registry.service_holdings.register(services.tenant_serving_holdings)
        # Deleting a project, tenant or model cascades to its endpoints: locked first.
        registry.before_cascade.register(services.lock_before_cascade)
        # Usage reports (telemetry, beside endpoints) count what replicas ran.
        registry.service_usage.register(usage.service_usage)
        post_migrate.connect(_schedule, sender=self)


def _schedule(sender, **kwargs):
    from core.schedules import register_minute_schedules
    from endpoints.tasks import SCHEDULES

    register_minute_schedules(SCHEDULES)
