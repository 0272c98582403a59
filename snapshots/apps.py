from django.apps import AppConfig


class SnapshotsConfig(AppConfig):
    name = "snapshots"
    default_auto_field = "django.db.models.BigAutoField"
