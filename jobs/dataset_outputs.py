"""What datasets asks of jobs to save a job's outputs as a version: declared in
`core.registry` and registered in jobs/apps.py, because datasets may not import jobs."""

from __future__ import annotations

from datasets.job_outputs import OutputFile
from jobs.models import Job
from projects.permissions import get_object_for_user


def jobs_with_outputs(user, tenant):
    """The jobs of `tenant` with output files that `user` may view, newest first."""
    return (
        Job.objects.visible_to(user)
        .filter(project__tenant=tenant, artifacts__isnull=False)
        .distinct()
        .order_by("-pk")
    )


def job_with_outputs(user, pk, token=None):
    """The job `pk` if the user (and API token) may view it; Http404 otherwise."""
    return get_object_for_user(user, Job, "job.view", token=token, pk=pk)


def job_output_files(job) -> list[OutputFile]:
    """The job's output files (worker N>0's under worker-N/)."""
    return [
        OutputFile(path=str(a), sha256=a.sha256, size=a.size, storage_name=a.file.name)
        for a in job.artifacts.all()
    ]
