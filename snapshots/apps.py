from django.apps import AppConfig


class SnapshotsConfig(AppConfig):
    name = "snapshots"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from core import registry
        from snapshots.services import pending_snapshot_bytes, tenant_snapshot_blobs

        # Snapshot contents live in the dataset blob store and count in the tenant's
        # storage quota; datasets may not import snapshots, so it asks through the registry.
        registry.blobs_held.register(tenant_snapshot_blobs)
        registry.bytes_reserved.register(pending_snapshot_bytes)
        post_migrate.connect(_schedule, sender=self)


def _schedule(sender, **kwargs):
    from core.schedules import register_minute_schedules
    from snapshots.tasks import SCHEDULES

    register_minute_schedules(SCHEDULES)
