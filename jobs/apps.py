from django.apps import AppConfig
from django.db.models.signals import post_migrate


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django_q.signals import post_spawn

        from core import registry
        from jobs import dataset_outputs, tasks
        from jobs.compute import sandbox  # noqa: F401 - registers its system check

        # Datasets saves a job's outputs as a version; it may not import jobs.
        registry.jobs_with_outputs.register(dataset_outputs.jobs_with_outputs)
        registry.job_with_outputs.register(dataset_outputs.job_with_outputs)
        registry.job_output_files.register(dataset_outputs.job_output_files)
        post_migrate.connect(tasks.register_schedules, sender=self)
        post_spawn.connect(tasks.on_worker_spawn, dispatch_uid="jobs.adopt")
