from django.apps import AppConfig


class ImagesConfig(AppConfig):
    name = "images"
    verbose_name = "Runtime images"
    default_auto_field = "django.db.models.BigAutoField"
