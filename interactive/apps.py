from django.apps import AppConfig


class InteractiveConfig(AppConfig):
    """Notebooks (the origin and its proxy), terminals and TensorBoard: sessions a person
    opens inside a running job. Above `jobs`; jobs knows nothing of them."""

    name = "interactive"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from interactive import proxy  # noqa: F401 - registers the notebook origin's system check
