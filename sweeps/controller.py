"""The sweep controller: one pass keeps a sweep's trials, its Optuna study and its jobs in
step. django-q runs it (sweeps/tasks.py) every minute and whenever a trial's job changes
state or reports metrics; tests call `control_sweep` directly.

A pass, under a lock on the sweep (an UPDATE of its row first: PostgreSQL locks the row,
SQLite takes its write lock, so two workers never run one sweep's pass at once):
1. every running trial reports its new objective values to Optuna (executor metrics, else
   the MLflow metrics of the job's run); the pruner may stop it: Optuna is told PRUNED
   and the job is cancelled with the pruner's reason;
2. a trial whose job ended is told to Optuna: COMPLETE with the last objective value, or
   FAIL with the job's reason;
3. the sweep stops when its first `stop_after_failures` trials all failed, or when its
   budget (trials, GPU-hours, wall time) is spent;
4. otherwise new trials are asked for, up to the parallelism limit, and submitted as
   ordinary jobs (`jobs.services.submit.submit_job`: they queue, are admitted against the
   tenant's quota and fair share like any job). No trial is added while one of the
   sweep's trials waits in the queue, so when GPUs are borrowed back (a trial preempted
   back to the queue, or quota exhausted) the sweep runs fewer trials at once instead of
   piling up queued ones.

The study's journal, the Trial rows and the jobs are written in one transaction: a worker
killed mid-pass leaves all three as they were.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone
from optuna.trial import TrialState as OptunaState

from jobs.models import MetricPoint
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from jobs.states import JobState
from sweeps import engine
from sweeps.models import FINISHED_STATES, Sweep, SweepState, Trial, TrialState
from sweeps.space import suggest

logger = logging.getLogger(__name__)

WAITING = {JobState.QUEUED, JobState.ADMITTED}


def objective_values(trial: Trial, metric: str) -> list[float]:
    """The objective's values in the order the trial reported them (rank 0's executor
    metrics; an MLflow-only script's run metrics otherwise)."""
    values = list(
        MetricPoint.objects.filter(job_id=trial.job_id, worker=0, name=metric)
        .exclude(value=None)
        .order_by("seq", "pk")
        .values_list("value", flat=True)
    )
    if values:
        return values
    from tracking.models import Metric

    return list(
        Metric.objects.filter(run__job_id=trial.job_id, key=metric, is_nan=False)
        .order_by("step", "timestamp", "pk")
        .values_list("value", flat=True)
    )


def device_hours(trials, now: datetime) -> float:
    """GPU-hours spent by the sweep's jobs; a job without GPUs counts each worker as one
    device, so a CPU sweep has a budget too."""
    total = 0.0
    for trial in trials:
        job = trial.job
        if job is None or job.started_at is None:
            continue
        seconds = ((job.finished_at or now) - job.started_at).total_seconds()
        total += max(seconds, 0) / 3600 * max(job.gpus, 1) * job.workers
    return total


def _fail(study, trial: Trial, reason: str, now) -> None:
    study.tell(trial.number, state=OptunaState.FAIL, skip_if_finished=True)
    trial.state, trial.reason, trial.finished_at = TrialState.FAILED, reason[:500], now
    trial.save(update_fields=["state", "reason", "finished_at"])


def report(sweep: Sweep, study, trial: Trial, now) -> bool:
    """Feed new objective values to Optuna; prune or finish the trial. True if it ended."""
    job = trial.job
    values = objective_values(trial, sweep.objective)
    tid = engine.trial_id(study, trial.number)
    for step in range(trial.reported + 1, len(values) + 1):
        study._storage.set_trial_intermediate_value(tid, step, values[step - 1])
    fresh = len(values) > trial.reported
    trial.reported = len(values)
    if values:
        trial.objective = values[-1]
    trial.save(update_fields=["reported", "objective"])
    if job is None:
        _fail(study, trial, "its job was deleted", now)
        return True
    if not job.is_terminal:
        if fresh and job.state == JobState.RUNNING and job.cancel_requested_at is None:
            frozen = study._storage.get_trial(tid)
            if study.pruner.prune(study, frozen):
                frozen = study._storage.get_trial(tid)  # with the rung the pruner just wrote
                reason = engine.prune_reason(sweep, study, frozen, len(values))
                study.tell(trial.number, state=OptunaState.PRUNED)
                trial.state, trial.reason, trial.finished_at = TrialState.PRUNED, reason, now
                trial.save(update_fields=["state", "reason", "finished_at"])
                with contextlib.suppress(ValidationError):  # it ended meanwhile
                    cancel_job(None, job, reason)
                return True
        return False
    if job.state == JobState.SUCCEEDED and values:
        study.tell(trial.number, values[-1])
        trial.state, trial.finished_at = TrialState.COMPLETE, now
        trial.reason = f"{sweep.objective} = {values[-1]:.4g} after {len(values)} reports"
        trial.save(update_fields=["state", "reason", "finished_at"])
    elif job.state == JobState.SUCCEEDED:
        _fail(study, trial, f"the job succeeded but never reported “{sweep.objective}”", now)
    else:
        _fail(study, trial, f"job {job.get_state_display().lower()}: {job.state_reason}", now)
    return True


def stop_reason(sweep: Sweep, trials: list[Trial], now) -> tuple[str, str] | None:
    """(final state, reason) when the sweep must stop now, else None."""
    ended = [t for t in trials if t.state != TrialState.RUNNING]
    good = [t for t in ended if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    first = sorted(ended, key=lambda t: t.number)[: sweep.stop_after_failures]
    if not good and len(first) >= sweep.stop_after_failures:
        why = "; ".join(f"trial {t.number}: {t.reason}" for t in first[:3])
        return SweepState.FAILED, (
            f"the first {len(first)} trials all failed ({why}): stopped instead of spending "
            "the budget; fix the template and start a new sweep"
        )[:500]
    if sweep.max_wall_seconds and (now - sweep.created_at).total_seconds() >= sweep.max_wall_seconds:
        return SweepState.SUCCEEDED, f"budget spent: wall time {sweep.max_wall_seconds // 60} min"
    if sweep.max_gpu_hours and device_hours(trials, now) >= sweep.max_gpu_hours:
        return SweepState.SUCCEEDED, f"budget spent: {sweep.max_gpu_hours:g} GPU-hours"
    if sweep.max_trials and len(trials) >= sweep.max_trials and len(ended) == len(trials):
        return SweepState.SUCCEEDED, f"budget spent: {len(trials)} of {sweep.max_trials} trials finished"
    return None


def finish(sweep: Sweep, study, trials: list[Trial], state: str, reason: str, now) -> None:
    """End the sweep: cancel what still runs (with the reason), then record the outcome."""
    best = best_trial(sweep)
    if best is not None and state == SweepState.SUCCEEDED:
        reason = f"{reason}; best: trial {best.number}, {sweep.objective} {best.objective:.4g}"
    for trial in trials:
        if trial.state != TrialState.RUNNING:
            continue
        _fail(study, trial, f"stopped with the sweep: {reason}", now)
        if trial.job is not None and not trial.job.is_terminal:
            with contextlib.suppress(ValidationError):  # it finished meanwhile
                cancel_job(None, trial.job, f"sweep #{sweep.pk} ended: {reason}"[:500])
    sweep.state, sweep.state_reason, sweep.finished_at = state, reason[:500], now
    sweep.save(update_fields=["state", "state_reason", "finished_at"])
    refresh_importance(sweep, study)


def best_trial(sweep: Sweep) -> Trial | None:
    order = "-objective" if sweep.direction == "maximize" else "objective"
    return (
        sweep.trials.filter(state=TrialState.COMPLETE, objective__isnull=False)
        .order_by(order, "number")
        .select_related("job")
        .first()
    )


def refresh_importance(sweep: Sweep, study) -> None:
    """Parameter importance, recomputed when the number of finished trials changed."""
    done = sweep.trials.filter(state=TrialState.COMPLETE).count()
    if done == sweep.importance_trials or done < 3:
        return
    Sweep.objects.filter(pk=sweep.pk).update(importance=engine.importance(study), importance_trials=done)


def submit_trial(sweep: Sweep, study, number_so_far: int) -> Trial:
    """Ask Optuna for a point and run it as a job (params as the job's parameters)."""
    from images.models import RuntimeImage

    asked = study.ask()
    params = suggest(asked, sweep.space)
    spec = dict(sweep.template)
    image_id = spec.pop("image", None)
    spec["parameters"] = {**(spec.get("parameters") or {}), **params}
    spec["name"] = f"{sweep.name} · trial {asked.number}"[:200]
    image = RuntimeImage.objects.filter(pk=image_id).first() if image_id else None
    job = submit_job(sweep.created_by, sweep.project, image=image, **spec)
    return Trial.objects.create(sweep=sweep, number=asked.number, job=job, params=params)


def launch(sweep: Sweep, study, trials: list[Trial], now) -> int:
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if any(t.job is not None and t.job.state in WAITING for t in running):
        return 0  # a trial waits for GPUs: add none until it runs
    # A pruned trial's job holds its resources until it has stopped: it still counts.
    in_flight = [
        t for t in trials if t.state == TrialState.RUNNING or (t.job is not None and not t.job.is_terminal)
    ]
    slots = sweep.parallelism - len(in_flight)
    if slots > 0 and sweep.created_by is None:
        reason = "a trial could not be submitted: the account that started the sweep was deleted"
        finish(sweep, study, trials, SweepState.FAILED, reason, now)
        return 0
    if sweep.max_trials:
        slots = min(slots, sweep.max_trials - len(trials))
    started = 0
    for _ in range(max(slots, 0)):
        try:
            with transaction.atomic():
                submit_trial(sweep, study, len(trials) + started)
        except (ValidationError, PermissionDenied, Http404) as exc:
            why = " ".join(exc.messages) if isinstance(exc, ValidationError) else (
                f"{getattr(sweep.created_by, 'username', 'its creator')} may no longer submit "
                "jobs in this project"
            )
            reason = f"a trial could not be submitted: {why}"
            finish(sweep, study, list(sweep.trials.select_related("job")), SweepState.FAILED, reason, now)
            return started
        started += 1
    return started


def control_sweep(sweep_id: int) -> str:
    """One controller pass (see the module's docstring); returns the sweep's state."""
    with transaction.atomic():
        if not Sweep.objects.filter(pk=sweep_id).update(state=F("state")):
            return "missing"
        sweep = Sweep.objects.select_related("project", "created_by").get(pk=sweep_id)
        if sweep.state in FINISHED_STATES:
            return sweep.state
        now = timezone.now()
        trials = list(sweep.trials.select_related("job").order_by("number"))
        study = engine.study_for(sweep, len(trials))
        ended = [report(sweep, study, t, now) for t in trials if t.state == TrialState.RUNNING]
        if any(ended):
            refresh_importance(sweep, study)
        if sweep.state == SweepState.STOPPING:
            finish(sweep, study, trials, SweepState.STOPPED, sweep.state_reason or "stopped", now)
            return sweep.state
        stop = stop_reason(sweep, trials, now)
        if stop is not None:
            finish(sweep, study, trials, *stop, now)
            return sweep.state
        launch(sweep, study, trials, now)
        return sweep.state
