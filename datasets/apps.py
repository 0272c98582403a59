from django.apps import AppConfig
from django.db.models.signals import post_migrate


class DatasetsConfig(AppConfig):
    name = "datasets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from datasets import tasks

        post_migrate.connect(tasks.register_schedules, sender=self)
