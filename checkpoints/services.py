"""Every change to checkpoints: the executor's begin / upload / commit, the lookups a
resume and the scheduler need, registering one as a model version, starting a job from
one, and the retention policy.

Atomicity: a checkpoint is `pending` until `commit_checkpoint` has checked, inside one
transaction, that every announced file arrived with its hash. Nothing reads a pending
checkpoint: the job page, the API, `latest_complete` (what a resume stages) and
`work_lost` (what the scheduler counts) all start from `Checkpoint.objects.complete()`.
An executor killed mid-upload leaves a pending row that retention removes later.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from checkpoints.models import (
    Checkpoint,
    CheckpointFile,
    CheckpointState,
    ResumeSource,
    RetentionPolicy,
)
from core import audit
from datasets.models import Blob, blob_key
from datasets.services.paths import human
from datasets.services.quotas import check_quota
from datasets.storage import store_blob
from jobs.consumers import publish_panel
from jobs.models import Job
from jobs.signals import job_alert
from projects.permissions import require

MAX_FILES = 10_000
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
SHA = re.compile(r"[0-9a-f]{64}")
CHUNK = 1024 * 1024
# A pending checkpoint nobody committed for this long was abandoned (executor killed).
ABANDONED_AFTER = timedelta(hours=6)


class CheckpointProblem(ValueError):
    """The executor's request cannot be honoured (answered 400 with the message)."""


# --- executor side ----------------------------------------------------------------------


def _clean_path(path: Any) -> str:
    if not isinstance(path, str):
        raise CheckpointProblem(f"a file path must be a string, not {type(path).__name__}")
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or len(path) > 900
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise CheckpointProblem(f"refused file path {path!r:.200}")
    return path


def _clean_files(files: Any) -> list[tuple[str, int, str]]:
    if not isinstance(files, list) or not files:
        raise CheckpointProblem("files must be a non-empty list of {path, size, sha256}")
    if len(files) > MAX_FILES:
        raise CheckpointProblem(f"a checkpoint holds at most {MAX_FILES} files")
    cleaned, seen = [], set()
    for entry in files:
        if not isinstance(entry, dict):
            raise CheckpointProblem("each file must be an object {path, size, sha256}")
        path = _clean_path(entry.get("path"))
        size, sha = entry.get("size"), str(entry.get("sha256") or "").lower()
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise CheckpointProblem(f"{path}: size must be a whole number of bytes")
        if not SHA.fullmatch(sha):
            raise CheckpointProblem(f"{path}: sha256 must be 64 hex digits")
        if path in seen:
            raise CheckpointProblem(f"{path} is listed twice")
        seen.add(path)
        cleaned.append((path, size, sha))
    return cleaned


def _clean_metrics(metrics: Any) -> dict[str, float | None]:
    if metrics in (None, ""):
        return {}
    if not isinstance(metrics, dict) or len(metrics) > 100:
        raise CheckpointProblem("metrics must be an object of at most 100 name: number")
    out: dict[str, float | None] = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key or len(key) > 200:
            raise CheckpointProblem("metric names must be non-empty strings")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise CheckpointProblem(f"metric {key!r} must be a number")
        out[key] = None if value is None else float(value)
    return out


def begin_checkpoint(job: Job, body: dict) -> Checkpoint:
    """Announce a checkpoint: its name (the folder under `checkpoints/`), step, metrics
    and files. Idempotent on the name: a complete one is returned as it is (the executor
    then skips it); a pending one with the same files continues where it stopped."""
    name = body.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise CheckpointProblem(
            "name must be 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    step = body.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise CheckpointProblem("step must be a whole number")
    if step is not None and abs(step) >= 2**63:
        raise CheckpointProblem("step is out of range")
    metrics = _clean_metrics(body.get("metrics"))
    files = _clean_files(body.get("files"))
    total = sum(size for _, size, _ in files)
    with transaction.atomic():
        existing = Checkpoint.objects.select_for_update().filter(job=job, name=name).first()
        if existing is not None:
            same = {(f.path, f.size, f.sha256) for f in existing.files.all()} == set(files)
            if existing.state == CheckpointState.COMPLETE or same:
                return existing
            existing.delete()  # a pending one whose files changed: start again
        try:
            check_quota(job.project.tenant, total)
        except ValidationError as exc:
            raise CheckpointProblem(" ".join(exc.messages)) from exc
        checkpoint = Checkpoint.objects.create(
            job=job,
            attempt=job.attempt,
            name=name,
            step=step,
            metrics=metrics,
            total_size=total,
        )
        CheckpointFile.objects.bulk_create(
            CheckpointFile(checkpoint=checkpoint, path=p, size=s, sha256=h) for p, s, h in files
        )
    return checkpoint


def missing_files(checkpoint: Checkpoint) -> list[str]:
    return list(checkpoint.files.filter(blob=None).values_list("path", flat=True))


def receive_file(checkpoint: Checkpoint, path: str, stream, sha256: str) -> CheckpointFile:
    """Store one announced file's bytes in the blob store; refused unless they hash to
    what was announced."""
    if checkpoint.state != CheckpointState.PENDING:
        raise CheckpointProblem(f"checkpoint {checkpoint.name} is already complete")
    entry = checkpoint.files.filter(path=path).first()
    if entry is None:
        raise CheckpointProblem(f"{path!r:.200} is not a file of checkpoint {checkpoint.name}")
    if (sha256 or "").lower() != entry.sha256:
        raise CheckpointProblem(f"{path}: X-Gantry-Sha256 differs from the announced sha256")
    digest, size = hashlib.sha256(), 0
    with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as tmp:
        while chunk := stream.read(CHUNK):
            size += len(chunk)
            if size > entry.size:
                raise CheckpointProblem(f"{path}: more than the announced {entry.size} bytes")
            digest.update(chunk)
            tmp.write(chunk)
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise CheckpointProblem(
                f"{path}: content does not match its announced sha256 and size "
                f"(got {digest.hexdigest()}, {size} bytes)"
            )
        tmp.seek(0)
        store_blob(entry.sha256, tmp)
    blob, _ = Blob.objects.get_or_create(sha256=entry.sha256, defaults={"size": size})
    CheckpointFile.objects.filter(pk=entry.pk).update(blob=blob)
    entry.blob = blob
    return entry


def commit_checkpoint(checkpoint: Checkpoint) -> Checkpoint:
    """Make a checkpoint complete, only if every file arrived and is in storage."""
    with transaction.atomic():
        locked = Checkpoint.objects.select_for_update().select_related("job").get(pk=checkpoint.pk)
        if locked.state == CheckpointState.COMPLETE:
            return locked
        files = list(locked.files.select_related("blob"))
        missing = [f.path for f in files if f.blob is None or f.blob.sha256 != f.sha256]
        missing += [
            f.path for f in files if f.blob is not None and not default_storage.exists(blob_key(f.sha256))
        ]
        if missing:
            raise CheckpointProblem(
                f"checkpoint {locked.name} is missing {len(missing)} file(s): "
                + ", ".join(sorted(set(missing))[:5])
            )
        locked.state = CheckpointState.COMPLETE
        locked.completed_at = timezone.now()
        locked.on_preemption = locked.job.preempt_requested_at is not None
        locked.save(update_fields=["state", "completed_at", "on_preemption"])
        job = locked.job
        step = "" if locked.step is None else f" at step {locked.step}"
        when = " (inside the preemption save window)" if locked.on_preemption else ""
        message = f"checkpoint {locked.name}{step} saved{when}: {human(locked.total_size)}"
        transaction.on_commit(
            lambda: job_alert.send(sender=None, job=job, kind="checkpoint_saved", message=message)
        )
        # The job's open pages refetch their checkpoints panel (checkpoints:job_checkpoints).
        transaction.on_commit(lambda: publish_panel(job.pk, "checkpoints"))
    return locked


def latest_complete(job: Job) -> Checkpoint | None:
    """What a new attempt of `job` resumes from: its own latest complete checkpoint (the
    highest step; the newest among equal or no steps), else the checkpoint it was started
    from (a job started from a checkpoint)."""
    # The furthest step first: a folder uploaded again later must not pass a newer one.
    own = (
        Checkpoint.objects.complete()
        .filter(job=job)
        .order_by(F("step").desc(nulls_last=True), "-completed_at", "-pk")
        .first()
    )
    if own is not None:
        return own
    source = ResumeSource.objects.filter(job=job).select_related("checkpoint").first()
    if source is not None and source.checkpoint and source.checkpoint.state == CheckpointState.COMPLETE:
        return source.checkpoint
    return None


def work_lost(jobs, now: datetime) -> dict[int, float]:
    """GPU-seconds each running job would lose if stopped now: its GPUs times the time
    since its last complete checkpoint (or since it started, whichever is later)."""
    jobs = [j for j in jobs if j.started_at is not None]
    last = dict(
        Checkpoint.objects.complete()
        .filter(job__in=[j.pk for j in jobs])
        .values("job")
        .annotate(at=Max("completed_at"))
        .values_list("job", "at")
    )
    lost = {}
    for j in jobs:
        since = max(j.started_at, last.get(j.pk) or j.started_at)
        lost[j.pk] = j.gpus * j.workers * max((now - since).total_seconds(), 0.0)
    return lost


def tenant_checkpoint_blobs(tenant):
    """The blobs a tenant's checkpoints hold (datasets' quota service counts them)."""
    return CheckpointFile.objects.filter(
        checkpoint__job__project__tenant=tenant, blob__isnull=False
    ).values("blob")


# --- people's side ----------------------------------------------------------------------


def _require_complete(checkpoint: Checkpoint) -> None:
    if checkpoint.state != CheckpointState.COMPLETE:
        raise ValidationError(f"Checkpoint {checkpoint.name} is still uploading.")


def register_as_model_version(actor, checkpoint: Checkpoint, model_name: str):
    """The checkpoint's files become the next version of a model of the job's project."""
    from modelhub.models import RegisteredModel
    from modelhub.services import create_model, upload_version

    require(actor, "model.register", checkpoint.job)
    _require_complete(checkpoint)
    model_name = (model_name or "").strip() or checkpoint.job.name
    project = checkpoint.job.project
    with transaction.atomic():
        model = RegisteredModel.objects.filter(project=project, name=model_name).first()
        if model is None:
            model = create_model(actor, project, name=model_name)
        files = [
            (f.path, default_storage.open(blob_key(f.sha256), "rb"))
            for f in checkpoint.files.order_by("path")
        ]
        try:
            step = "" if checkpoint.step is None else f", step {checkpoint.step}"
            version = upload_version(
                actor,
                model,
                files,
                description=f"From checkpoint {checkpoint.name} of job #{checkpoint.job_id}{step}.",
            )
        finally:
            for _, handle in files:
                handle.close()
    return version


def start_job_from(actor, checkpoint: Checkpoint) -> Job:
    """A clone of the checkpoint's job that resumes from this checkpoint."""
    from jobs.services.submit import clone_job

    require(actor, "job.submit", checkpoint.job.project)
    _require_complete(checkpoint)
    with transaction.atomic():
        job = clone_job(actor, checkpoint.job)
        ResumeSource.objects.create(job=job, checkpoint=checkpoint)
        audit.record(actor, "checkpoint.resume", job, checkpoint=checkpoint.pk)
    return job


def set_retention(actor, project, *, keep_last: int, keep_best: int = 1, metric: str = "",
                  higher_is_better: bool = False) -> RetentionPolicy:
    require(actor, "project.change", project)
    if keep_last < 1:
        raise ValidationError({"keep_last": "Keep at least the last checkpoint."})
    if keep_best < 0:
        raise ValidationError({"keep_best": "Must not be negative."})
    policy, _ = RetentionPolicy.objects.update_or_create(
        project=project,
        defaults={
            "keep_last": keep_last,
            "keep_best": keep_best,
            "metric": (metric or "").strip(),
            "higher_is_better": higher_is_better,
        },
    )
    audit.record(actor, "checkpoint.retention", policy, tenant=project.tenant)
    return policy


def _keep(checkpoints: list[Checkpoint], policy: RetentionPolicy | None) -> set[int]:
    keep_last = policy.keep_last if policy else settings.GANTRY_CHECKPOINT_KEEP_LAST
    keep = {c.pk for c in checkpoints[:keep_last]}  # newest first
    if policy and policy.metric and policy.keep_best:
        scored = [c for c in checkpoints if isinstance(c.metrics.get(policy.metric), (int, float))]
        scored.sort(key=lambda c: c.metrics[policy.metric], reverse=policy.higher_is_better)
        keep |= {c.pk for c in scored[: policy.keep_best]}
    return keep


def apply_retention(job: Job, now: datetime | None = None) -> int:
    """Delete the job's checkpoints the project's policy does not keep, and pending ones
    abandoned long ago. A checkpoint a queued or running job will resume from stays.
    Their blobs go with datasets' garbage collection. Returns how many were deleted."""
    now = now or timezone.now()
    policy = RetentionPolicy.objects.filter(project_id=job.project_id).first()
    complete = list(Checkpoint.objects.complete().filter(job=job).order_by("-completed_at", "-pk"))
    keep = _keep(complete, policy)
    from jobs import states

    keep |= set(
        ResumeSource.objects.filter(checkpoint__job=job)
        .exclude(job__state__in=states.TERMINAL)
        .values_list("checkpoint_id", flat=True)
    )
    doomed = [c.pk for c in complete if c.pk not in keep]
    doomed += Checkpoint.objects.filter(
        job=job, state=CheckpointState.PENDING, created_at__lt=now - ABANDONED_AFTER
    ).values_list("pk", flat=True)
    if not doomed:
        return 0
    try:
        deleted, _ = Checkpoint.objects.filter(pk__in=doomed).delete()
    except IntegrityError:  # pragma: no cover - a concurrent resume source; next run
        return 0
    return len(doomed) if deleted else 0
