"""What datasets need of jobs to save a job's outputs as a version, handed in at start-up
(jobs/apps.py) because datasets may not import jobs (datasets/job_outputs.py)."""

from __future__ import annotations

from datasets.job_outputs import OutputFile
from jobs.models import Job
from projects.permissions import get_object_for_user


class JobOutputs:
    def jobs_with_outputs(self, user, tenant):
        return (
            Job.objects.visible_to(user)
            .filter(project__tenant=tenant, artifacts__isnull=False)
            .distinct()
            .order_by("-pk")
        )

    def get_job(self, user, pk, token=None):
        return get_object_for_user(user, Job, "job.view", token=token, pk=pk)

    def files(self, job) -> list[OutputFile]:
        return [
            OutputFile(path=str(a), sha256=a.sha256, size=a.size, storage_name=a.file.name)
            for a in job.artifacts.all()
        ]
