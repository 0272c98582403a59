from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Gantry core"

    def ready(self):
        from core import signals  # noqa: F401
