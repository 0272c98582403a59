from django.apps import AppConfig
from django.db.models.signals import post_migrate


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django_q.signals import post_spawn

        from datasets import job_outputs
        from jobs import (
            proxy,  # noqa: F401 - registers the notebook origin's system check
            tasks,
        )
        from jobs.backends import sandbox  # noqa: F401 - registers its system check
        from jobs.dataset_outputs import JobOutputs

        job_outputs.provide(JobOutputs())  # datasets may not import jobs: handed in
        post_migrate.connect(tasks.register_schedules, sender=self)
        post_spawn.connect(tasks.on_worker_spawn, dispatch_uid="jobs.adopt")
