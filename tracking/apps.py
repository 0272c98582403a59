from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracking"
    verbose_name = "Experiment tracking (MLflow API)"
    default_auto_field = "django.db.models.BigAutoField"
