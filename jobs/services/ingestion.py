"""What running executors send: log lines, metric points, heartbeats and worker status.

Items carry sequence numbers; a repeated batch is dropped, so an executor may resend
after any failure and nothing is stored or shown twice."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from jobs import states
from jobs.compute import get_backend
from jobs.consumers import publish_lines, publish_metrics
from jobs.models import Job, JobWorker, LogChunk, MetricPoint
from jobs.services.lifecycle import WORKER_DONE, cluster_stopped_reason, settle_job
from jobs.services.validation import BIGINT_MAX, INT_MAX
from jobs.signals import metrics_reported
from jobs.states import JobState, transition


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
    duplicates (the executor sends at least once) and are dropped. Returns last seq (the
    executor's numbering). Lines are stored shifted past the lines Gantry wrote itself
    (JobWorker.log_seq_offset, jobs.services.system_log)."""
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
            last_seq = fresh[-1]["seq"]
            if worker.log_seq_offset:
                fresh = [{**ln, "seq": ln["seq"] + worker.log_seq_offset} for ln in fresh]
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
            worker.last_log_seq = last_seq
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
            names = {m["name"][:200] for m in fresh}
            transaction.on_commit(partial(metrics_reported.send, sender=None, job=job, names=names))
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
