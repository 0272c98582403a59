"""Notification tests run the real senders against real receivers on loopback; the
django-q broker is the one stand-in: `queued` records what would go on the queue, and
`run()` calls those task functions here, in order (as a worker would)."""

from __future__ import annotations

import importlib

import pytest

from jobs.services.submit import submit_job
from jobs.states import transition
from projects import services as project_services


class Queue:
    def __init__(self):
        self.queued: list[tuple[str, tuple, dict]] = []

    def __call__(self, func, *args, **kwargs):
        kwargs.pop("task_name", None)
        if isinstance(func, str) and func.startswith("notifications."):
            self.queued.append((func, args, kwargs))  # admission kicks are not ours to run

    def names(self) -> list[str]:
        return [func for func, _, _ in self.queued]

    def run(self) -> int:
        """Run queued tasks (and what they queue) until the queue is empty."""
        ran = 0
        while self.queued:
            func, args, kwargs = self.queued.pop(0)
            module, name = func.rsplit(".", 1)
            getattr(importlib.import_module(module), name)(*args, **kwargs)
            ran += 1
        return ran


@pytest.fixture
def queue(monkeypatch):
    import django_q.tasks

    recorder = Queue()
    monkeypatch.setattr(django_q.tasks, "async_task", recorder)
    return recorder


@pytest.fixture(autouse=True)
def _quick_retries(settings):
    settings.GANTRY_NOTIFY_RETRY_SECONDS = 0  # a failed attempt is due again at once
    settings.GANTRY_NOTIFY_MAX_ATTEMPTS = 3
    settings.GANTRY_NOTIFY_TIMEOUT_SECONDS = 1


@pytest.fixture
def move(django_capture_on_commit_callbacks):
    """Move a job through states as its backend would; each change commits and so sends
    job_transitioned, as in production."""

    def go(job, *states, reason="done"):
        for state in states:
            with django_capture_on_commit_callbacks(execute=True):
                assert transition(job, state, reason), (job.state, state)
        return job

    return go


@pytest.fixture
def job(owner, project):
    return submit_job(owner, project, name="digits", command="python train.py")


@pytest.fixture
def developer(make_user, project, owner):
    user = make_user("dora")
    from accounts import services as account_services

    account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=user, role="member")
    project_services.add_project_member(actor=owner, project=project, user=user, role="developer")
    return user


RUN_TO_END = ("admitted", "starting", "running")
