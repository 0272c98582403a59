from django.apps import AppConfig


class EndpointsConfig(AppConfig):
    name = "endpoints"
    verbose_name = "Model endpoints"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The cluster page (scheduling, below endpoints) lists what endpoints hold; jobs'
        # holdings and scheduling's admission count it in tenants' quotas.
        from core import registry
        from endpoints import services

        registry.serving_replicas.register(services.serving_replicas)
        registry.service_holdings.register(services.tenant_serving_holdings)
        # Deleting a project, tenant or model cascades to its endpoints: locked first.
        registry.before_cascade.register(services.lock_before_cascade)
