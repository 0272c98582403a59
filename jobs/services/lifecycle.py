"""State changes for jobs: submit, cancel, clone, the executor's reports, launch and reconcile.

Views, the API, the executor endpoints and the background tasks all call these;
none of them writes a job directly. Every change of `Job.state` goes through
`jobs.states.transition`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import shlex
import tempfile
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from core import audit
from jobs import states
from jobs.backends import get_backend
from jobs.consumers import publish_lines, publish_metrics
from jobs.models import Artifact, Job, JobEvent, JobKind, JobWorker, LogChunk, MetricPoint
from jobs.placement import devices_overlap
from jobs.signals import first_answer, submit_check
from jobs.states import JobState, transition
from projects.permissions import require

logger = logging.getLogger(__name__)

SPEC_FIELDS = (
    "name",
    "kind",
    "runtime",
    "command",
    "parameters",
    "env",
    "gpus",
    "cpus",
    "memory_mb",
    "workers",
    "inputs",
    "outputs_dir",
    "timeout_seconds",
    "max_retries",
    "priority",
)
# \Z, not $: a $ would let a name end in a newline.
PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
# A command is split like a shell would (slow on megabytes) and passed to exec; a value
# becomes an environment variable, and Linux refuses one longer than 128 KiB at exec.
MAX_COMMAND = 10_000
MAX_VALUE = 32_768
MAX_TIMEOUT_SECONDS = 366 * 24 * 3600
INT_MAX = 2**31 - 1  # what an integer column holds on every database
BIGINT_MAX = 2**63 - 1
TOKEN_PREFIX = "gjt_"
MAX_RETRIES = 10
WORKER_DONE = ("succeeded", "failed", "cancelled", "timed_out", "lost")


# --- submitting -------------------------------------------------------------------------


def _int(errors, spec, name, *, minimum=0, maximum=INT_MAX, default=None, nullable=False):
    value = spec.get(name, default)
    if value is None or value == "":
        if nullable:
            return None
        errors[name] = "This field is required."
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            errors[name] = "Enter a whole number."
            return None
    if value < minimum:
        errors[name] = f"Must be at least {minimum}."
    elif value > maximum:
        errors[name] = f"Must be at most {maximum}."
    return value


def _unstorable(value: Any) -> bool:
    """A NUL or a non-finite number anywhere in `value`: PostgreSQL stores neither in
    jsonb, and neither means anything in a job's spec."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return True
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def validate_spec(spec: dict[str, Any], backend=None) -> dict[str, Any]:
    """Check a job spec against the rules and the backend; returns the cleaned spec.

    Raises ValidationError with one message per field, so forms and the API can
    show each error where it belongs.
    """
    backend = backend or get_backend()
    errors: dict[str, str] = {}
    unknown = set(spec) - set(SPEC_FIELDS)
    if unknown:
        errors["__all__"] = f"Unknown job fields: {', '.join(sorted(unknown))}."
    clean: dict[str, Any] = {}

    kind = spec.get("kind") or JobKind.TRAIN
    if kind not in JobKind.values:
        errors["kind"] = f"Choose one of: {', '.join(JobKind.values)}."
    clean["kind"] = kind

    command = (spec.get("command") or "").strip()
    if kind == JobKind.NOTEBOOK:
        command = ""  # the backend builds a notebook's command
    elif len(command) > MAX_COMMAND:
        errors["command"] = f"At most {MAX_COMMAND} characters."
    elif not command:
        errors["command"] = "Give the command to run, e.g. python train.py."
    else:
        try:
            if not shlex.split(command):
                errors["command"] = "Give the command to run, e.g. python train.py."
        except ValueError as exc:
            errors["command"] = f"Cannot split the command into arguments: {exc}."
    clean["command"] = command

    name = (spec.get("name") or "").strip()
    if not name:
        name = kind if not command else f"{kind}: {command}"[:80]
    if len(name) > 200:
        errors["name"] = "At most 200 characters."
    clean["name"] = name

    runtime = (spec.get("runtime") or "").strip()
    problem = backend.runtime_problem(runtime) if hasattr(backend, "runtime_problem") else None
    if problem:
        errors["runtime"] = problem
    clean["runtime"] = runtime

    parameters = spec.get("parameters")
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        errors["parameters"] = "Parameters must be a mapping of name to value."
        parameters = {}
    for key, value in parameters.items():
        if not isinstance(key, str) or not PARAMETER_NAME.match(key):
            errors["parameters"] = (
                f"“{key}” is not a valid parameter name (letters, digits, _ and -, "
                "not starting with a digit or -)."
            )
            break
        if not isinstance(value, bool | int | float | str) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            errors["parameters"] = (
                f"Parameter “{key}” must be a number, true/false or text, not {type(value).__name__}."
            )
            break
        if isinstance(value, str) and (len(value) > MAX_VALUE or "\x00" in value):
            errors["parameters"] = f"Parameter “{key}”: at most {MAX_VALUE} characters, no NUL."
            break
    clean["parameters"] = parameters

    env = spec.get("env")
    env = {} if env is None else env
    if not isinstance(env, dict):
        errors["env"] = "Environment must be a mapping of variable to value."
        env = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            errors["env"] = f"“{key}” is not a valid environment variable name."
            break
        if key.startswith("GANTRY_"):
            errors["env"] = f"{key}: variables starting with GANTRY_ are set by Gantry."
            break
        if not isinstance(value, bool | int | float | str) or _unstorable(value):
            errors["env"] = f"{key} must be text or a number."
            break
        if len(str(value)) > MAX_VALUE:
            errors["env"] = f"{key}: at most {MAX_VALUE} characters."
            break
    clean["env"] = {k: str(v) for k, v in env.items()} if "env" not in errors else {}

    clean["gpus"] = _int(errors, spec, "gpus", default=0)
    clean["cpus"] = _int(errors, spec, "cpus", minimum=1, default=1)
    clean["memory_mb"] = _int(errors, spec, "memory_mb", minimum=16, default=1024)
    clean["workers"] = _int(errors, spec, "workers", minimum=1, maximum=64, default=1)
    clean["timeout_seconds"] = _int(
        errors, spec, "timeout_seconds", minimum=1, maximum=MAX_TIMEOUT_SECONDS, nullable=True
    )
    clean["max_retries"] = _int(errors, spec, "max_retries", maximum=MAX_RETRIES, default=0)
    clean["priority"] = _int(errors, spec, "priority", minimum=-1000, maximum=1000, default=0)
    if clean["workers"] and clean["workers"] > 1 and kind != JobKind.DISTRIBUTED:
        errors["workers"] = "Only distributed jobs have more than one worker."

    # Resources beyond what the backend has could never be admitted.
    capacity = backend.capacity()
    n = clean["workers"] or 1
    where = backend.where
    for field, want, have, unit in (
        ("gpus", clean["gpus"], capacity.gpu_count, "GPU(s)"),
        ("cpus", clean["cpus"], capacity.cpus, "CPU(s)"),
        ("memory_mb", clean["memory_mb"], capacity.memory_mb, "MiB of memory"),
    ):
        if field in errors or want is None:
            continue
        if want * n > have:
            each = f" ({want} for each of {n} workers)" if n > 1 else ""
            errors.setdefault(
                field,
                f"Asks for {want * n} {unit}{each}, but there are only {have} {where}: "
                "it can never run as submitted.",
            )

    inputs = spec.get("inputs")
    inputs = [] if inputs is None else inputs
    if not isinstance(inputs, list):
        errors["inputs"] = "Inputs must be a list."
    elif _unstorable(inputs):
        errors["inputs"] = "Inputs may not hold NUL characters or non-finite numbers."
    clean["inputs"] = inputs if isinstance(inputs, list) else []

    outputs_dir = (spec.get("outputs_dir") or "outputs").strip().strip("/") or "outputs"
    if outputs_dir.startswith("/") or ".." in outputs_dir.split("/") or "\\" in outputs_dir:
        errors["outputs_dir"] = "A relative folder inside the job's working directory."
    clean["outputs_dir"] = outputs_dir

    if errors:
        raise ValidationError(errors)
    return clean


@transaction.atomic
def submit_job(actor, project, *, cloned_from: Job | None = None, image=None, **spec) -> Job:
    """Queue a job in `project`; admission picks it up within seconds.

    With `image` (an images.RuntimeImage) the images app resolves and records the
    digest the job runs with (images.services.submit_job_with_image, which calls
    back here without `image`); imported here, not at module level, so jobs does
    not depend on images at import time.
    """
    require(actor, "job.submit", project)
    if image is not None:
        from images.services import submit_job_with_image

        return submit_job_with_image(actor, project, image, cloned_from=cloned_from, **spec)
    backend = get_backend()
    clean = validate_spec(spec, backend)
    # Dataset inputs are pinned to a version here, so the job reads exactly what it named.
    from datasets.services import clean_job_inputs

    clean["inputs"] = clean_job_inputs(actor, project, clean["inputs"])
    never = first_answer(submit_check, project=project, spec=clean, backend=backend)
    if never:
        raise ValidationError({never[0]: never[1]})
    refusal = getattr(backend, "submit_problem", lambda project: None)(project)
    if refusal:
        raise ValidationError(refusal)
    job = Job.objects.create(
        project=project,
        created_by=actor,
        backend=backend.name,
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


def _note(job: Job, reason: str, actor=None) -> None:
    """A timeline entry that is not a state change (a cancel request, a kill)."""
    JobEvent.objects.create(
        job=job,
        from_state=job.state,
        to_state=job.state,
        reason=reason[:500],
        actor=actor if getattr(actor, "pk", None) else None,
    )


def report_backend_problem(job: Job, reason: str, *, terminal: bool) -> bool:
    """What a backend learned about a launched job that no executor can report, because
    none runs yet (the cluster refuses to create its pods, no node takes them).

    `terminal=False`: the job keeps starting and shows `reason` (a timeline entry once
    per distinct reason). `terminal=True`: the attempt fails with `reason`, retried like
    any failed attempt while retries remain; the backend deletes what it created.
    Backends never change a job's state themselves: this is their way to ask.
    Returns True when something changed."""
    reason = reason[:500]
    job.refresh_from_db()
    if job.state not in states.LAUNCHED:
        return False
    if not terminal:
        changed = (
            Job.objects.filter(pk=job.pk, state=JobState.STARTING)
            .exclude(state_reason=reason)
            .update(state_reason=reason)
        )
        if changed:
            job.state_reason = reason
            _note(job, reason)
        return bool(changed)
    unfinished = JobWorker.objects.filter(job=job).exclude(state__in=WORKER_DONE)
    if not unfinished.update(state="failed", reason=reason):
        return False
    settle_job(job)
    return True


def cluster_stopped_reason(job: Job, reason: str) -> str:
    """The reason of a worker whose executor was stopped (SIGTERM) by no request of
    Gantry's: a node drained, a pod evicted or preempted by the cluster, a host shut down."""
    where = "the cluster" if job.backend == "kubernetes" else "something outside Gantry"
    detail = reason.removeprefix("cancelled: ").strip() or "no detail"
    return f"stopped by {where} ({detail})"


def cancel_job(actor, job: Job, reason: str | None = None) -> Job:
    """Cancel a job: at once if nothing runs yet, otherwise ask its executors to stop.

    A running job stays `running` until its executors report back (or reconcile's
    backstop gives up waiting); its reason says the cancel is under way.
    """
    if actor is not None:
        require(actor, "job.cancel", job)
    who = getattr(actor, "username", None) or "Gantry"
    reason = reason or f"cancelled by {who}"
    for _ in range(5):
        job.refresh_from_db()
        if job.is_terminal:
            raise ValidationError(
                f"Job #{job.pk} has already finished ({job.get_state_display().lower()})."
            )
        if job.state in (JobState.QUEUED, JobState.ADMITTED):
            if transition(job, JobState.CANCELLED, reason, actor=actor):
                if actor is not None:
                    audit.record(actor, "job.cancel", job)
                return job
            continue  # lost a race with admission or launch: look again
        with transaction.atomic():
            first = Job.objects.filter(pk=job.pk, cancel_requested_at__isnull=True).update(
                cancel_requested_at=timezone.now(), state_reason=f"{reason}; stopping"
            )
            if first:
                _note(job, f"{reason}: stopping the processes", actor)
        job.refresh_from_db()
        if actor is not None and first:
            audit.record(actor, "job.cancel", job)
        get_backend(job.backend).cancel(job)
        return job
    raise ValidationError("The job changed state too often to cancel; try again.")


# --- usage ------------------------------------------------------------------------------


def usage_by_tenant(tenant_ids) -> dict[int, dict[str, int]]:
    """What each tenant's jobs hold now and how many wait, in one aggregate query:
    {tenant id: {"gpus", "cpus", "memory_mb", "jobs", "queued"}} (active = admitted,
    starting or running; a job being preempted still holds its resources)."""
    active = Q(state__in=states.ACTIVE)
    rows = (
        Job.objects.filter(project__tenant_id__in=list(tenant_ids))
        .filter(active | Q(state=JobState.QUEUED))
        .values("project__tenant_id")
        .annotate(
            gpus=Sum(F("gpus") * F("workers"), filter=active),
            cpus=Sum(F("cpus") * F("workers"), filter=active),
            memory_mb=Sum(F("memory_mb") * F("workers"), filter=active),
            jobs=Count("pk", filter=active),
            queued=Count("pk", filter=Q(state=JobState.QUEUED)),
        )
    )
    empty = {"gpus": 0, "cpus": 0, "memory_mb": 0, "jobs": 0, "queued": 0}
    usage = {tid: dict(empty) for tid in tenant_ids}
    for row in rows:
        usage[row.pop("project__tenant_id")] = {k: row[k] or 0 for k in empty}
    return usage


def tenant_usage(tenant) -> dict[str, int]:
    """GPUs, CPUs, memory (MiB) and jobs the tenant's active jobs hold now."""
    usage = usage_by_tenant([tenant.pk])[tenant.pk]
    return {k: usage[k] for k in ("gpus", "cpus", "memory_mb", "jobs")}


# --- launching --------------------------------------------------------------------------


def make_token(rank: int, secret: str) -> str:
    """An executor token: `gjt_<rank>_<secret>`. All workers of an attempt share the secret
    (its sha256 is on the Job); the rank tells the spec endpoint which worker asks."""
    return f"{TOKEN_PREFIX}{rank}_{secret}"


def parse_token(token: str) -> tuple[int, str] | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    rank, _, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not rank.isdigit() or not secret:
        return None
    return int(rank), secret


def launch_job(job: Job) -> bool:
    """admitted -> starting, then start the executors. False if another launcher won."""
    backend = get_backend(job.backend)
    holder = device_holder(job)
    if holder is not None:
        reason = f"admitted; starts when job #{holder.pk} has stopped and freed its devices"
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).exclude(state_reason=reason).update(
            state_reason=reason
        )
        return False
    secret = secrets.token_urlsafe(32)
    placement = dict(job.placement)
    if job.kind == JobKind.DISTRIBUTED:
        from jobs.backends.local import free_port

        placement["master_port"] = free_port()
    n = job.workers
    if not transition(
        job,
        JobState.STARTING,
        f"starting {n} worker{'s' if n > 1 else ''}",
        token_hash=Job.hash_token(secret),
        placement=placement,
        cancel_requested_at=None,
        preempt_requested_at=None,
    ):
        return False
    now = timezone.now()
    JobWorker.objects.filter(job=job).update(
        state="starting",
        exit_code=None,
        reason="",
        pid=None,
        pid_start_time=None,
        child_pid=None,
        child_start_time=None,
        launched_at=now,
        last_heartbeat_at=None,
    )
    try:
        backend.launch(job, lambda rank: make_token(rank, secret))
    except Exception as exc:
        logger.exception("could not launch job %s", job.pk)
        backend.kill(job)
        job.refresh_from_db()
        end_attempt(job, JobState.FAILED, f"could not start: {exc}")
    return True


def device_holder(job: Job) -> Job | None:
    """A launched job still holding GPUs or CPU slots promised to `job` (a job being
    preempted for it, within its grace period), or None."""
    if not job.placement:
        return None
    others = (
        Job.objects.filter(state__in=states.LAUNCHED, backend=job.backend)
        .exclude(pk=job.pk)
        .only("pk", "placement")
    )
    return next((o for o in others if devices_overlap(o.placement, job.placement)), None)


# --- preemption -------------------------------------------------------------------------

STOPPING = "; stopping"


def preempt_job(job: Job, reason: str) -> None:
    """Make room for another job. Nothing launched yet: back to the queue at once.
    Launched: SIGTERM (the executor creates GANTRY_PREEMPT_FILE first, so training code
    can checkpoint) and, when the workers have stopped, `requeue_preempted`. A preempted
    job never fails for it, keeps its submit order and priority, and reuses its working
    directory when it runs again."""
    for _ in range(3):
        if job.state == JobState.ADMITTED:
            if transition(
                job,
                JobState.QUEUED,
                f"{reason}; requeued (preemption {job.preemptions + 1})",
                placement={},
                preemptions=job.preemptions + 1,
            ):
                return
        elif job.state in states.LAUNCHED:
            grace = settings.GANTRY_JOB_GRACE_SECONDS
            first = Job.objects.filter(
                pk=job.pk,
                state=job.state,
                preempt_requested_at__isnull=True,
                cancel_requested_at__isnull=True,
            ).update(preempt_requested_at=timezone.now(), state_reason=f"{reason}{STOPPING}")
            if first:
                _note(job, f"{reason}: asking it to stop (SIGTERM, {grace} s grace)")
                transaction.on_commit(partial(get_backend(job.backend).cancel, job))
            return
        else:
            return
        job.refresh_from_db()  # lost a race with launch: look again


def requeue_preempted(job: Job, detail: str = "") -> bool:
    """A preempted job's workers have stopped: back to the queue (not failed)."""
    reason = job.state_reason.removesuffix(STOPPING) or "preempted"
    n = job.preemptions + 1
    return transition(
        job,
        JobState.QUEUED,
        f"{reason}{f' ({detail})' if detail else ''}; requeued (preemption {n})",
        placement={},
        preempt_requested_at=None,
        preemptions=n,
    )


def end_attempt(job: Job, outcome: str, reason: str, actor=None) -> bool:
    """Finish the current attempt: retry (back to queued) if it failed or was lost and
    retries remain, otherwise move to `outcome`."""
    retryable = outcome in (JobState.FAILED, JobState.LOST) and not job.cancel_requested_at
    if retryable and job.attempt <= job.max_retries:
        word = "lost" if outcome == JobState.LOST else "failed"
        nxt = job.attempt + 1
        return transition(
            job,
            JobState.QUEUED,
            f"attempt {job.attempt} {word} ({reason}); retrying, {nxt} of {job.max_retries + 1}",
            actor=actor,
            attempt=nxt,
            token_hash="",
            placement={},
            cancel_requested_at=None,
        )
    return transition(job, outcome, reason, actor=actor)


# --- the executor's side ----------------------------------------------------------------


def executor_job(job_id: int, token: str) -> tuple[Job, int] | None:
    """The job and worker rank a token is good for, or None.

    Valid while the job runs and for GANTRY_JOB_TOKEN_GRACE_MINUTES after it ended;
    never for another job (the caller answers 404 either way).
    """
    parsed = parse_token(token)
    if parsed is None:
        return None
    rank, secret = parsed
    job = Job.objects.filter(pk=job_id).select_related("project").first()
    if job is None or not job.token_hash:
        return None
    if not hmac.compare_digest(Job.hash_token(secret), job.token_hash):
        return None
    if job.is_terminal:
        grace = timedelta(minutes=settings.GANTRY_JOB_TOKEN_GRACE_MINUTES)
        if job.finished_at is None or timezone.now() - job.finished_at > grace:
            return None
    if rank >= job.workers:
        return None
    return job, rank


def job_spec_for_executor(job: Job, rank: int) -> dict[str, Any]:
    from datasets.services import inputs_for_executor

    backend = get_backend(job.backend)
    worker = JobWorker.objects.get(job=job, rank=rank)
    JobWorker.objects.filter(pk=worker.pk).update(last_heartbeat_at=timezone.now())
    return {
        "job": job.pk,
        "kind": job.kind,
        "command": backend.command(job, worker),
        "env": backend.environment(job, worker),
        "timeout_seconds": job.timeout_seconds,
        "grace_seconds": settings.GANTRY_JOB_GRACE_SECONDS,
        "heartbeat_seconds": settings.GANTRY_HEARTBEAT_SECONDS,
        "outputs_dir": job.outputs_dir,
        "inputs": inputs_for_executor(job),
    }


def _ts(value) -> datetime:
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return timezone.now()


def _seq(item) -> int:
    seq = item.get("seq") if isinstance(item, dict) else None
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= BIGINT_MAX:
        raise ValueError(f"every item needs a positive integer seq, got {item!r:.200}")
    return seq


def _int32(value) -> bool:
    """A whole number an integer column holds (a pid, an exit code)."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= INT_MAX


def _locked_worker(job: Job, rank: int) -> JobWorker:
    return JobWorker.objects.select_for_update().get(job=job, rank=rank)


def ingest_logs(job: Job, rank: int, lines: list) -> int:
    """Store a batch of log lines; items at or below the worker's last seq are
    duplicates (the executor sends at least once) and are dropped. Returns last seq."""
    if not isinstance(lines, list):
        raise ValueError("lines must be a list")
    for line in lines:
        _seq(line)
        if line.get("stream") not in ("stdout", "stderr", "system"):
            raise ValueError(f"unknown stream in {line!r:.200}")
        if not isinstance(line.get("text"), str):
            raise ValueError("every line needs text")
    with transaction.atomic():
        worker = _locked_worker(job, rank)
        fresh = sorted((ln for ln in lines if ln["seq"] > worker.last_log_seq), key=_seq)
        if fresh:
            data = "".join(
                json.dumps(
                    {
                        "seq": ln["seq"],
                        "stream": ln["stream"],
                        "ts": ln.get("ts"),
                        "text": ln["text"],
                    },
                    ensure_ascii=False,
                )
                + "\n"
                for ln in fresh
            )
            LogChunk.objects.create(
                job=job,
                worker=rank,
                first_seq=fresh[0]["seq"],
                last_seq=fresh[-1]["seq"],
                line_count=len(fresh),
                data=data,
            )
            worker.last_log_seq = fresh[-1]["seq"]
            JobWorker.objects.filter(pk=worker.pk).update(last_log_seq=worker.last_log_seq)
            transaction.on_commit(partial(publish_lines, job.pk, rank, fresh))
        return worker.last_log_seq


def ingest_metrics(job: Job, rank: int, metrics: list) -> int:
    """Store metric points, de-duplicated on the worker's last metric seq."""
    if not isinstance(metrics, list):
        raise ValueError("metrics must be a list")
    for item in metrics:
        _seq(item)
        if not isinstance(item.get("name"), str) or not item["name"] or "\x00" in item["name"]:
            raise ValueError("every metric needs a name (text without NUL)")
        value, step = item.get("value"), item.get("step")
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or abs(value) > 1e308  # first: an int too large for a float
            or not math.isfinite(value)
        ):
            raise ValueError("metric values are numbers or null")
        if step is not None and (
            isinstance(step, bool) or not isinstance(step, int) or abs(step) > BIGINT_MAX
        ):
            raise ValueError("metric steps are integers or null")
    with transaction.atomic():
        worker = _locked_worker(job, rank)
        fresh = sorted((m for m in metrics if m["seq"] > worker.last_metric_seq), key=_seq)
        if fresh:
            points = MetricPoint.objects.bulk_create(
                MetricPoint(
                    job=job,
                    worker=rank,
                    seq=m["seq"],
                    name=m["name"][:200],
                    step=m.get("step"),
                    value=m.get("value"),
                    ts=_ts(m.get("ts")),
                )
                for m in fresh
            )
            worker.last_metric_seq = fresh[-1]["seq"]
            JobWorker.objects.filter(pk=worker.pk).update(last_metric_seq=worker.last_metric_seq)
            transaction.on_commit(partial(publish_metrics, job.pk, rank, points))
        return worker.last_metric_seq


def record_heartbeat(job: Job, rank: int) -> bool:
    """Note that a worker is alive; True if it should stop (cancel requested or job over)."""
    JobWorker.objects.filter(job=job, rank=rank).update(last_heartbeat_at=timezone.now())
    return (
        job.cancel_requested_at is not None
        or job.preempt_requested_at is not None
        or job.state not in states.LAUNCHED
    )


def record_worker_status(job: Job, rank: int, body: dict) -> None:
    """The executor's `started` and `exited` reports."""
    event = body.get("event")
    backend = get_backend(job.backend)
    if event == "started":
        pid = body.get("pid")
        with transaction.atomic():
            worker = _locked_worker(job, rank)
            if worker.state in WORKER_DONE:
                return
            worker.child_pid = pid if _int32(pid) else None
            worker.state = "running"
            worker.last_heartbeat_at = timezone.now()
            if hasattr(backend, "on_worker_started"):
                backend.on_worker_started(worker)
            worker.save(
                update_fields=["child_pid", "child_start_time", "state", "last_heartbeat_at"]
            )
        started = JobWorker.objects.filter(job=job, state__in=("running", *WORKER_DONE)).count()
        if job.state == JobState.STARTING and started >= job.workers:
            gpus = job.placement.get("gpus") or {}
            where = ""
            if any(gpus.values()):
                where = " on GPU " + ", ".join(
                    str(i) for rank_gpus in gpus.values() for i in rank_gpus
                )
            transition(job, JobState.RUNNING, f"running{where}")
        return
    if event != "exited":
        raise ValueError(f"unknown status event {event!r}")
    outcome = body.get("outcome")
    if outcome not in ("succeeded", "failed", "cancelled", "timed_out"):
        raise ValueError(f"unknown outcome {outcome!r}")
    code = body.get("exit_code")
    reason = str(body.get("reason") or outcome).replace("\x00", "")
    with transaction.atomic():
        worker = _locked_worker(job, rank)
        if worker.state in WORKER_DONE:
            return  # a repeated report
        if outcome == "cancelled":
            job.refresh_from_db()
            if (
                job.state in states.LAUNCHED
                and job.cancel_requested_at is None
                and job.preempt_requested_at is None
            ):
                # Gantry asked no one to stop (a gang's other workers are stopped only
                # once the attempt is over): the cluster or the host did. Not a user's
                # cancel: lost, and retried while retries remain.
                outcome, reason = "lost", cluster_stopped_reason(job, reason)
        worker.state = outcome
        worker.exit_code = code if _int32(code) else None
        worker.reason = reason[:500]
        worker.save(update_fields=["state", "exit_code", "reason"])
    settle_job(job)


def settle_job(job: Job) -> None:
    """Decide a launched job's state from its workers' outcomes."""
    job.refresh_from_db()
    if job.state not in states.LAUNCHED:
        return
    workers = list(job.worker_set.all())
    bad = [w for w in workers if w.state in WORKER_DONE and w.state != "succeeded"]
    if bad:
        w = bad[0]
        who = f"worker {w.rank} " if job.workers > 1 else ""
        backend = get_backend(job.backend)
        others = [x.rank for x in workers if x.state not in WORKER_DONE]
        if others:
            # One worker of a gang failing dooms the others (torchrun does the same).
            backend.cancel(job, ranks=others)
        if job.cancel_requested_at is not None:
            reason = job.state_reason.removesuffix("; stopping") or "cancelled"
            transition(job, JobState.CANCELLED, reason)
        elif job.preempt_requested_at is not None:
            if not others:  # the whole gang has stopped
                requeue_preempted(job)
        elif w.state == "timed_out":
            transition(job, JobState.TIMED_OUT, f"{who}{w.reason}")
        elif w.state == "cancelled":
            transition(job, JobState.CANCELLED, f"{who}{w.reason}")
        else:
            end_attempt(
                job, JobState.FAILED if w.state == "failed" else JobState.LOST, f"{who}{w.reason}"
            )
        return
    if workers and all(w.state == "succeeded" for w in workers):
        if job.workers > 1:
            reason = f"all {job.workers} workers exited with code 0"
        else:
            reason = workers[0].reason or "exited with code 0"
        transition(job, JobState.SUCCEEDED, reason)


def _safe_relative_path(path: str) -> str:
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or any(p in ("", ".", "..") for p in parts)
        or len(path) > 900
    ):
        raise ValueError(f"refused artifact path {path!r:.200}")
    return path


def store_artifact(job: Job, rank: int, path: str, stream, sha256: str) -> tuple[Artifact, bool]:
    """Stream one output file into the default storage; idempotent on (worker, path, sha256).

    Returns (artifact, created). ValueError when the content does not match `sha256`.
    """
    path = _safe_relative_path(path)
    sha256 = (sha256 or "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError("X-Gantry-Sha256 must be a hex sha256")
    digest = hashlib.sha256()
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as tmp:
        while chunk := stream.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            tmp.write(chunk)
        if digest.hexdigest() != sha256:
            raise ValueError(
                f"content does not match X-Gantry-Sha256 (got {digest.hexdigest()}, {size} bytes)"
            )
        existing = Artifact.objects.filter(job=job, worker=rank, path=path).first()
        if existing and existing.sha256 == sha256:
            return existing, False
        prefix = f"worker-{rank}/" if rank else ""
        name = f"jobs/{job.pk}/outputs/{prefix}{path}"
        if existing:
            existing.file.delete(save=False)
        elif default_storage.exists(name):
            default_storage.delete(name)
        tmp.seek(0)
        saved = default_storage.save(name, File(tmp, name=name))
    artifact, created = Artifact.objects.update_or_create(
        job=job,
        worker=rank,
        path=path,
        defaults={"size": size, "sha256": sha256, "file": saved, "created_at": timezone.now()},
    )
    return artifact, created


# --- reconcile --------------------------------------------------------------------------


def _lose_worker(job: Job, rank: int, reason: str) -> None:
    JobWorker.objects.filter(job=job, rank=rank).exclude(state__in=WORKER_DONE).update(
        state="lost", reason=reason[:500]
    )


def reconcile_job(job: Job, now: datetime | None = None, *, adopting: bool = False) -> str | None:
    """Compare one launched job with its processes and the clock; returns what was done."""
    now = now or timezone.now()
    backend = get_backend(job.backend)
    probes = {p.rank: p for p in (backend.adopt(job) if adopting else backend.probe(job))}
    job.refresh_from_db()
    if job.state not in states.LAUNCHED:
        return None
    grace = settings.GANTRY_JOB_GRACE_SECONDS
    if job.preempt_requested_at and not job.cancel_requested_at:
        alive = any(p.alive for p in probes.values())
        if not alive or (now - job.preempt_requested_at).total_seconds() > grace + 30:
            backend.kill(job)
            requeue_preempted(job, "processes killed: they did not stop in time" if alive else "")
            return "preempted"
        return None
    workers = [w for w in job.worker_set.all() if w.state not in WORKER_DONE]
    timeout = settings.GANTRY_HEARTBEAT_TIMEOUT_SECONDS
    who = (lambda w: f"worker {w.rank} ") if job.workers > 1 else (lambda w: "")
    for w in workers:
        probe = probes.get(w.rank)
        if probe is not None and not probe.alive:
            reason = (
                f"{who(w)}executor was gone when the platform restarted ({probe.detail})"
                if adopting
                else f"{who(w)}{probe.detail or 'executor process vanished'}"
            )
            backend.kill(job)
            _lose_worker(job, w.rank, reason)
            end_attempt(job, JobState.LOST, reason)
            return "lost"
        seen = w.last_heartbeat_at or w.launched_at
        if seen and (now - seen).total_seconds() > timeout:
            reason = f"{who(w)}no heartbeat for {int((now - seen).total_seconds())} s"
            backend.kill(job)
            _lose_worker(job, w.rank, reason)
            end_attempt(job, JobState.LOST, reason)
            return "lost"
        if probe is not None and probe.rss_mb is not None and probe.rss_mb > job.memory_mb:
            reason = (
                f"{who(w)}exceeded its memory limit of {job.memory_mb} MiB "
                f"(resident {probe.rss_mb} MiB)"
            )
            _note(job, reason + ": killing it")
            backend.kill(job)
            JobWorker.objects.filter(job=job, rank=w.rank).update(state="failed", reason=reason)
            end_attempt(job, JobState.FAILED, reason)
            return "memory"
    if job.cancel_requested_at and (now - job.cancel_requested_at).total_seconds() > grace + 30:
        backend.kill(job)
        transition(
            job, JobState.CANCELLED, "cancelled (processes killed: they did not stop in time)"
        )
        return "cancelled"
    if job.timeout_seconds and job.started_at:
        limit = job.timeout_seconds + grace + 30
        if (now - job.started_at).total_seconds() > limit:
            backend.kill(job)
            transition(
                job,
                JobState.TIMED_OUT,
                f"timed out after {job.timeout_seconds} s (stopped by the server)",
            )
            return "timed_out"
    if (
        job.kind == JobKind.NOTEBOOK
        and job.state == JobState.RUNNING
        and not job.cancel_requested_at
    ):
        idle = timedelta(minutes=settings.GANTRY_NOTEBOOK_IDLE_MINUTES)
        last = job.last_activity_at or job.started_at
        if last and now - last > idle:
            cancel_job(
                None,
                job,
                f"stopped after {settings.GANTRY_NOTEBOOK_IDLE_MINUTES} minutes without activity",
            )
            return "idle"
    return None


def notebook_target(job: Job) -> tuple[str, int, str, str] | None:
    """Where the proxy (jobs/proxy.py) forwards /jobs/<id>/lab/: (host, port, token, base_url).

    None unless the job is a running notebook. The token never leaves the server.
    """
    if job.kind != JobKind.NOTEBOOK or job.state != JobState.RUNNING:
        return None
    worker = JobWorker.objects.filter(job=job, rank=0).first()
    if worker is None or not worker.port:
        return None
    return worker.host or "127.0.0.1", worker.port, worker.notebook_token, f"/jobs/{job.pk}/lab/"


def touch_notebook(job: Job) -> None:
    """The proxy calls this on every request (at most once a minute is written)."""
    cutoff = timezone.now() - timedelta(minutes=1)
    Job.objects.filter(pk=job.pk).exclude(last_activity_at__gt=cutoff).update(
        last_activity_at=timezone.now()
    )
