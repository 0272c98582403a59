from django.apps import AppConfig


class SnapshotsConfig(AppConfig):
    name = "snapshots"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from datasets.services import quotas
        from snapshots.services import pending_snapshot_bytes, tenant_snapshot_blobs

        # Snapshot contents live in the dataset blob store and count in the tenant's
        # storage quota; datasets may not import snapshots, so snapshots hands in its blobs.
        quotas.count_blobs_of(tenant_snapshot_blobs)
        quotas.count_reserved_by(pending_snapshot_bytes)
        post_migrate.connect(_schedule, sender=self)


def _schedule(sender, **kwargs):
    from core.schedules import register_minute_schedules
    from snapshots.tasks import SCHEDULES

    register_minute_schedules(SCHEDULES)
