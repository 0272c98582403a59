from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "checkpoints"
    verbose_name = "Checkpoints"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from checkpoints.services import tenant_checkpoint_blobs
        from core import registry

        # Checkpoint files live in the dataset blob store and count in the tenant's storage
        # quota; datasets may not import checkpoints, so it asks through the registry.
        registry.blobs_held.register(tenant_checkpoint_blobs)
        post_migrate.connect(_schedule, sender=self)


def _schedule(sender, **kwargs):
    from core.schedules import register_minute_schedules

    register_minute_schedules(
        {"checkpoints.retention": ("checkpoints.tasks.enforce_retention", 15)}
    )
