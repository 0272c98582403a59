"""Experiments and runs built through the tracking services, as MLflow's client would
(for the page tests and the generated access test, tests/test_access.py)."""

from tracking.models import Experiment, Run
from tracking.services.access import Caller
from tracking.services.experiments import create_experiment
from tracking.services.runs import create_run, log_batch, update_run


def log_run(owner, experiment, name, *, params=None, metrics=None, status="FINISHED", tags=None):
    """A run with `params` {key: value} and `metrics` {key: [values by step]}."""
    caller = Caller(owner)
    run = create_run(caller, str(experiment.pk), run_name=name)
    points = [
        {"key": key, "value": value, "timestamp": 1_000 + step, "step": step}
        for key, values in (metrics or {}).items()
        for step, value in enumerate(values)
    ]
    for start in range(0, max(len(points), 1), 1000):
        log_batch(
            caller,
            run.run_id,
            metrics=points[start : start + 1000],
            params=[{"key": k, "value": str(v)} for k, v in (params or {}).items()]
            if start == 0
            else [],
            tags=[{"key": k, "value": v} for k, v in (tags or {}).items()] if start == 0 else [],
        )
    update_run(caller, run.run_id, status=status, end_time=run.start_time + 60_000)
    return Run.objects.get(pk=run.pk)


def access_objects(project, owner):
    experiment = create_experiment(Caller(owner), "lab-a/vision/digits")
    run = log_run(owner, experiment, "baseline", params={"lr": 0.1}, metrics={"loss": [1, 0.5]})
    return {Experiment: experiment, Run: run}
