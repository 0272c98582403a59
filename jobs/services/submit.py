"""Submitting jobs: submit, clone and retry.

Views, the API and other apps (images, modelhub) call these; none of them creates a
Job row directly."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from core import audit, registry
from images.services import check_image_for_project, resolve_for_job
from jobs.compute import get_backend
from jobs.models import Job, JobEvent, JobImage, JobWorker
from jobs.services.validation import SPEC_FIELDS, validate_spec
from jobs.states import JobState
from projects.permissions import require


def pin_image(actor, project, image, backend, spec: dict[str, Any]) -> str:
    """Check that `actor` may run `image` in `project` and return the digest the job runs
    with; the tag is resolved now (it may have moved since the image was registered).

    On the local backend an image with a local environment supplies the job's runtime
    (unless `spec` names one; `spec` is changed in place). An image without one is
    allowed and runs with the platform interpreter, which the job page and API say
    (JobImage.runtime_note): the digest is still recorded, so the same
    spec on the Kubernetes backend runs in the image.
    """
    check_image_for_project(actor, project, image)
    if backend.name == "local" and image.local_env and not (spec.get("runtime") or "").strip():
        problem = backend.runtime_problem(image.local_env)
        if problem:
            raise ValidationError(
                {"image": f"The image's local environment cannot be used here: {problem}"}
            )
        spec["runtime"] = image.local_env
    return resolve_for_job(image)


def check_submission(actor, project, *, image=None, **spec) -> tuple[dict[str, Any], str | None]:
    """Everything `submit_job` checks, creating nothing: the cleaned spec (inputs pinned to
    versions, the code snapshot looked up) and the image's digest. Raises ValidationError
    keyed by field. Sweeps call it to refuse a template before any trial runs."""
    require(actor, "job.submit", project)
    backend = get_backend()
    digest = pin_image(actor, project, image, backend, spec) if image is not None else None
    clean = validate_spec(spec, backend)
    # Dataset inputs are pinned to a version here, so the job reads exactly what it named.
    from datasets.services.inputs import clean_job_inputs

    clean["inputs"] = clean_job_inputs(actor, project, clean["inputs"])
    # The code: a ready snapshot of this project the actor may see (or none).
    from snapshots.services import snapshot_for_job

    clean["code_snapshot"] = snapshot_for_job(actor, project, clean["code_snapshot"])
    never = registry.never_runs(project, clean, backend)
    if never:
        raise ValidationError({never[0]: never[1]})
    refusal = getattr(backend, "submit_problem", lambda project: None)(project)
    if refusal:
        raise ValidationError(refusal)
    return clean, digest


@transaction.atomic
def submit_job(actor, project, *, cloned_from: Job | None = None, image=None, **spec) -> Job:
    """Queue a job in `project`; admission picks it up within seconds.

    With `image` (an images.RuntimeImage) the job runs in it, pinned to the digest its
    tag resolves to now (`pin_image`).
    """
    clean, digest = check_submission(actor, project, image=image, **spec)
    job = Job.objects.create(
        project=project,
        created_by=actor,
        backend=get_backend().name,
        state=JobState.QUEUED,
        state_reason="waiting for admission",
        cloned_from=cloned_from,
        **clean,
    )
    JobWorker.objects.bulk_create([JobWorker(job=job, rank=r) for r in range(job.workers)])
    JobEvent.objects.create(
        job=job,
        from_state="",
        to_state=JobState.QUEUED,
        reason=f"submitted by {actor.username}"
        + (f" (from job #{cloned_from.pk})" if cloned_from else ""),
        actor=actor,
    )
    if image is not None:
        JobImage.objects.create(job=job, image=image, reference=image.reference, digest=digest)
    audit.record(actor, "job.submit", job, kind=job.kind, command=job.command)
    from jobs.tasks import kick

    transaction.on_commit(kick)
    return job


def job_spec(job: Job) -> dict[str, Any]:
    """The submit-time spec of a job (what clone and retry start from)."""
    return {name: getattr(job, name) for name in SPEC_FIELDS}


def clone_job(actor, job: Job, **overrides) -> Job:
    """A new job from an old one's spec, with `overrides` applied (clone-and-edit)."""
    spec = {**job_spec(job), **overrides}
    if "image" not in overrides:
        # The same image (its tag resolved again); none if the image has been deleted.
        record = getattr(job, "image_record", None)
        spec["image"] = record.image if record else None
    return submit_job(actor, job.project, cloned_from=job, **spec)


def retry_job(actor, job: Job) -> Job:
    """Run a finished job again, as a new job with the same spec."""
    require(actor, "job.submit", job.project)
    if not job.is_terminal:
        raise ValidationError(f"Job #{job.pk} is still {job.get_state_display().lower()}.")
    return clone_job(actor, job)
