from django.apps import AppConfig
from django.db.models.signals import post_migrate


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from jobs.signals import job_alert, job_transitioned
        from notifications import receivers, tasks

        job_transitioned.connect(receivers.on_job_transitioned, dispatch_uid="notifications.job")
        job_alert.connect(receivers.on_job_alert, dispatch_uid="notifications.alert")
        post_migrate.connect(tasks.register_schedules, sender=self)
