"""Sweeps built through the services, as a user would, and helpers that play a trial's job
through jobs' own services (state transitions, metric ingestion) where no process runs."""

import json

import pytest

from jobs.models import Job
from jobs.services.ingestion import ingest_metrics
from jobs.states import JobState, transition
from sweeps.services import create_sweep
from tests.jobs.conftest import job_settings, running_jobs  # noqa: F401 - jobs' fixtures, shared

DOC = {
    "name": "digits",
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
    "template": {"command": "python train.py", "parameters": {"epochs": 3}, "cpus": 1, "memory_mb": 256},
    "parameters": {
        "lr": {"type": "loguniform", "low": 0.0001, "high": 0.1},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
        "momentum": {"type": "uniform", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}},
    },
    "sampler": "random",
    "budget": {"trials": 4},
    "parallelism": 2,
    "seed": 7,
}


@pytest.fixture
def make_sweep(owner, project, settings):
    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 8192

    def make(**changes):
        return create_sweep(owner, project, json.dumps({**DOC, **changes}))

    return make


def run(job: Job) -> Job:
    """The job as if admitted and started (the backend's part, without a process)."""
    for state in (JobState.ADMITTED, JobState.STARTING, JobState.RUNNING):
        job.refresh_from_db()
        assert transition(job, state, f"test: {state}")
    return job


def report(job: Job, name: str, *values: float) -> None:
    worker = job.worker_set.get(rank=0)
    start = worker.last_metric_seq
    ingest_metrics(job, 0, [
        {"seq": start + i + 1, "name": name, "value": v, "step": (i + 1) * 10} for i, v in enumerate(values)
    ])


def end(job: Job, state: str, reason: str = "test") -> Job:
    job.refresh_from_db()
    assert transition(job, state, reason)
    return job
