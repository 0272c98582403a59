from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "GPU telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        post_migrate.connect(_schedule, sender=self)


def _schedule(sender, **kwargs):
    from core.schedules import register_minute_schedules

    register_minute_schedules({"telemetry.tick": ("telemetry.tasks.tick", 1)})
