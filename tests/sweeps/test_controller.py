"""The controller pass against real jobs: trials are submitted through jobs' services and
their jobs are moved by jobs' own state machine and metric ingestion (no process runs:
the backend's part is what tests/sweeps/test_sweep_digits.py exercises for real)."""

import json

import pytest

from jobs.models import Job
from jobs.states import JobState
from sweeps.controller import control_sweep
from sweeps.models import SweepState, TrialState
from tests.sweeps.conftest import end, report, run


def trial_jobs(sweep):
    return [t.job for t in sweep.trials.select_related("job").order_by("number")]


def test_trials_are_jobs_with_their_parameters_up_to_the_parallelism(make_sweep):
    sweep = make_sweep()
    control_sweep(sweep.pk)
    jobs = trial_jobs(sweep)
    assert len(jobs) == 2  # parallelism
    for trial in sweep.trials.all():
        assert trial.job.parameters == {"epochs": 3, **trial.params}
        assert set(trial.params) in ({"lr", "optimizer"}, {"lr", "optimizer", "momentum"})
        assert ("momentum" in trial.params) == (trial.params["optimizer"] == "sgd")
        assert trial.job.state == JobState.QUEUED


def test_no_trial_is_added_while_one_waits_in_the_queue(make_sweep):
    sweep = make_sweep()
    control_sweep(sweep.pk)
    first, second = trial_jobs(sweep)
    run(first)
    end(first, JobState.FAILED, "exit code 1")
    control_sweep(sweep.pk)
    assert sweep.trials.count() == 2, "the second trial still waits for room: no third one"
    run(second)
    control_sweep(sweep.pk)
    assert sweep.trials.count() == 3


def test_the_sweep_ends_when_its_trial_budget_is_spent_with_the_best_trial(make_sweep):
    sweep = make_sweep(budget={"trials": 3})
    scores = iter([0.5, 0.9, 0.7])
    while True:
        control_sweep(sweep.pk)
        sweep.refresh_from_db()
        waiting = [j for j in trial_jobs(sweep) if j.state == JobState.QUEUED]
        if not waiting:
            break
        for job in waiting:
            run(job)
            report(job, "val_accuracy", 0.1, next(scores))
            end(job, JobState.SUCCEEDED)
    assert sweep.state == SweepState.SUCCEEDED
    assert sweep.trials.count() == 3
    assert "budget spent: 3 of 3 trials finished" in sweep.state_reason
    assert "best: trial 1, val_accuracy 0.9" in sweep.state_reason
    assert list(sweep.trials.values_list("objective", flat=True)) == [0.5, 0.9, 0.7]
    assert set(sweep.importance) <= {"lr", "optimizer", "momentum"} and sweep.importance_trials == 3


def test_a_sweep_whose_first_trials_all_fail_stops_with_the_reason(make_sweep):
    sweep = make_sweep(stop_after_failures=2, budget={"trials": 20})
    control_sweep(sweep.pk)
    for job in trial_jobs(sweep):
        run(job)
        end(job, JobState.FAILED, "exit code 2: ModuleNotFoundError: No module named 'torchh'")
    control_sweep(sweep.pk)
    sweep.refresh_from_db()
    assert sweep.state == SweepState.FAILED
    assert "the first 2 trials all failed" in sweep.state_reason
    assert "No module named 'torchh'" in sweep.state_reason
    assert sweep.trials.count() == 2, "no budget burnt after the failures"
    control_sweep(sweep.pk)
    assert sweep.trials.count() == 2


def test_a_trial_behind_the_median_is_pruned_and_its_job_cancelled_with_the_reason(make_sweep):
    sweep = make_sweep(pruner={"type": "median", "startup_trials": 1}, parallelism=1, budget={"trials": 3})
    control_sweep(sweep.pk)
    (good,) = trial_jobs(sweep)
    run(good)
    report(good, "val_accuracy", 0.6, 0.8, 0.9)
    end(good, JobState.SUCCEEDED)
    control_sweep(sweep.pk)
    bad = trial_jobs(sweep)[1]
    run(bad)
    report(bad, "val_accuracy", 0.2)
    control_sweep(sweep.pk)
    trial = sweep.trials.get(number=1)
    assert trial.state == TrialState.PRUNED
    assert trial.reason.startswith("pruned at step 1: objective val_accuracy 0.2 worse than the median 0.6")
    bad.refresh_from_db()
    assert bad.cancel_requested_at is not None, "the running job is asked to stop"
    assert bad.state_reason.startswith("pruned at step 1: objective val_accuracy 0.2")
    control_sweep(sweep.pk)
    assert sweep.trials.count() == 2, "the pruned trial's job still holds its place until it stops"
    end(bad, JobState.CANCELLED, "stopped")
    control_sweep(sweep.pk)
    assert sweep.trials.count() == 3


def test_budget_by_wall_time_cancels_what_runs(make_sweep):
    sweep = make_sweep(budget={"wall_minutes": 1})
    control_sweep(sweep.pk)
    jobs = trial_jobs(sweep)
    type(sweep).objects.filter(pk=sweep.pk).update(created_at=sweep.created_at.replace(year=2000))
    control_sweep(sweep.pk)
    sweep.refresh_from_db()
    assert sweep.state == SweepState.SUCCEEDED and "wall time 1 min" in sweep.state_reason
    assert all(Job.objects.get(pk=j.pk).state == JobState.CANCELLED for j in jobs)
    assert set(sweep.trials.values_list("state", flat=True)) == {TrialState.FAILED}


def test_stop_cancels_running_trials(make_sweep, owner):
    from sweeps.services import stop_sweep

    sweep = make_sweep()
    control_sweep(sweep.pk)
    stop_sweep(owner, sweep)
    assert sweep.state == SweepState.STOPPED and sweep.state_reason == "stopped by olivia"
    assert {j.state for j in Job.objects.all()} == {JobState.CANCELLED}
    with pytest.raises(Exception, match="already ended"):
        stop_sweep(owner, sweep)


def test_a_sweep_whose_creator_may_no_longer_submit_stops_saying_so(make_sweep, owner, member, project):
    from projects import services as project_services
    from sweeps.models import Sweep

    project_services.add_project_member(actor=owner, project=project, user=member, role="developer")
    sweep = make_sweep()
    Sweep.objects.filter(pk=sweep.pk).update(created_by=member)
    project_services.PROJECT_MEMBERS.remove(actor=owner, member=project.members.get(user=member))
    control_sweep(sweep.pk)
    sweep.refresh_from_db()
    assert sweep.state == SweepState.FAILED
    assert sweep.state_reason == "a trial could not be submitted: max may no longer submit jobs in this project"
    assert not sweep.trials.exists()


def test_an_mlflow_only_trial_feeds_the_pruner_from_its_runs_metrics(make_sweep, owner):
    """A script that logs with MLflow (relayed to its job's run) rather than the executor."""
    from tracking.jobenv import run_for_job
    from tracking.services.access import Caller
    from tracking.services.runs import log_batch

    sweep = make_sweep(parallelism=1, budget={"trials": 2})
    control_sweep(sweep.pk)
    (job,) = trial_jobs(sweep)
    run(job)
    run_record = run_for_job(job)
    metrics = [{"key": "val_accuracy", "value": v, "timestamp": 1000 + i, "step": i} for i, v in enumerate([0.4, 0.7])]
    log_batch(Caller(owner), run_record.run_id, metrics=metrics)
    control_sweep(sweep.pk)
    trial = sweep.trials.get(number=0)
    assert (trial.reported, trial.objective) == (2, 0.7)
    end(job, JobState.SUCCEEDED)
    control_sweep(sweep.pk)
    trial.refresh_from_db()
    assert trial.state == TrialState.COMPLETE and trial.objective == 0.7


def test_budget_by_gpu_hours_counts_running_trials_and_stops_them(make_sweep):
    from datetime import timedelta

    sweep = make_sweep(budget={"gpu_hours": 0.5})
    control_sweep(sweep.pk)
    first, _second = trial_jobs(sweep)
    run(first)
    Job.objects.filter(pk=first.pk).update(started_at=first.started_at - timedelta(minutes=31))
    control_sweep(sweep.pk)
    sweep.refresh_from_db()
    assert sweep.state == SweepState.SUCCEEDED and "budget spent: 0.5 GPU-hours" in sweep.state_reason
    assert Job.objects.get(pk=first.pk).cancel_requested_at is not None


@pytest.mark.parametrize("sampler", ["random", "grid", "tpe", "cmaes"])
def test_every_sampler_proposes_points_of_the_space(make_sweep, sampler):
    space = {
        "width": {"type": "int", "low": 16, "high": 64, "step": 16},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    }
    if sampler != "grid":
        space["lr"] = {"type": "loguniform", "low": 0.0001, "high": 0.1}
    sweep = make_sweep(sampler=sampler, parameters=space, parallelism=3, budget={"trials": 6})
    for _ in range(2):  # a second round, after the first trials ended, uses their results
        control_sweep(sweep.pk)
        for job in trial_jobs(sweep):
            if job.state == JobState.QUEUED:
                run(job)
                report(job, "val_accuracy", 0.5)
                end(job, JobState.SUCCEEDED)
    points = [t.params for t in sweep.trials.all()]
    assert len(points) == 6
    for point in points:
        assert point["width"] in (16, 32, 48, 64) and point["optimizer"] in ("adam", "sgd")
        assert sampler == "grid" or 0.0001 <= point["lr"] <= 0.1
    if sampler == "grid":
        assert len({json.dumps(p, sort_keys=True) for p in points}) == 6, "no grid point twice"
