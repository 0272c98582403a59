"""The executor's endpoints: what a job's executor sends with its token (logs, metrics,
heartbeats, status reports, artifacts); they are not in the OpenAPI schema."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from django.test import Client

from jobs.models import Job
from jobs.services.launch import make_token
from tests.hostile.world import _json_text, _problems_of_answer, probe, refusal_problems

pytestmark = pytest.mark.django_db


# --- the executor's endpoints (a job's token; not in the OpenAPI schema) ------------------


@pytest.fixture
def running(world):
    """The queued job, running, with a token its executor would hold."""
    secret = "probe-secret"
    Job.objects.filter(pk=world["job"].pk).update(
        state="running", token_hash=Job.hash_token(secret)
    )
    token = make_token(0, secret)
    return world["job"], {"HTTP_AUTHORIZATION": f"Bearer {token}"}


EXECUTOR_BODIES = {
    "malformed": b"{not json",
    "array": b"[1]",
    "nested-100k": b"[" * 100_000 + b"]" * 100_000,
    "nan-literal": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "x", "ts": NaN}]}',
    "inf-by-overflow": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "x", "ts": 1e400}]}',
    "lone-surrogate": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "\\ud800"}]}',
    "invalid-utf8": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "\xff"}]}',
    "another-worker": b'{"worker": 3, "lines": []}',
}


def _executor_cases() -> dict[str, tuple[str, Any]]:
    line = {"seq": 1, "stream": "stdout", "text": "x"}
    metric = {"seq": 1, "name": "loss", "value": 0.5, "step": 1}
    return {
        "lines-object": ("logs", {"lines": {"seq": 1}}),
        "seq-zero": ("logs", {"lines": [{**line, "seq": 0}]}),
        "seq-true": ("logs", {"lines": [{**line, "seq": True}]}),
        "seq-string": ("logs", {"lines": [{**line, "seq": "1"}]}),
        "seq-huge": ("logs", {"lines": [{**line, "seq": 10**30}]}),
        "seq-int64-max+1": ("logs", {"lines": [{**line, "seq": 2**63}]}),
        "stream-unknown": ("logs", {"lines": [{**line, "stream": "stdin"}]}),
        "text-not-text": ("logs", {"lines": [{**line, "text": ["x"]}]}),
        "line-not-object": ("logs", {"lines": ["x"]}),
        "metrics-object": ("metrics", {"metrics": {"seq": 1}}),
        "metric-name-empty": ("metrics", {"metrics": [{**metric, "name": ""}]}),
        "metric-name-list": ("metrics", {"metrics": [{**metric, "name": ["loss"]}]}),
        "metric-name-nul": ("metrics", {"metrics": [{**metric, "name": "lo\x00ss"}]}),
        "metric-value-text": ("metrics", {"metrics": [{**metric, "value": "0.5"}]}),
        "metric-value-true": ("metrics", {"metrics": [{**metric, "value": True}]}),
        "metric-value-huge": ("metrics", {"metrics": [{**metric, "value": 10**400}]}),
        "metric-step-float": ("metrics", {"metrics": [{**metric, "step": 1.5}]}),
        "metric-step-huge": ("metrics", {"metrics": [{**metric, "step": 10**30}]}),
        "metric-seq-huge": ("metrics", {"metrics": [{**metric, "seq": 2**63}]}),
        "status-unknown-event": ("status", {"event": "exploded"}),
        "status-unknown-outcome": ("status", {"event": "exited", "outcome": "won"}),
    }


def test_hostile_executor_bodies_are_refused(running):
    job, auth = running
    problems = []
    for endpoint in ("logs", "metrics", "heartbeat", "status"):
        url = f"/api/v1/executor/jobs/{job.pk}/{endpoint}"
        for name, body in EXECUTOR_BODIES.items():
            if endpoint == "heartbeat" and name in (
                "nan-literal",
                "inf-by-overflow",
                "lone-surrogate",
            ):
                continue  # a heartbeat reads nothing but the worker
            outcome = probe(
                lambda u=url, b=body: Client().generic(
                    "POST", u, b, content_type="application/json", **auth
                ),
                job,
            )
            problems += _problems_of_answer(outcome, True, f"{endpoint} {name}")
    for name, (endpoint, body) in _executor_cases().items():
        url = f"/api/v1/executor/jobs/{job.pk}/{endpoint}"
        outcome = probe(
            lambda u=url, b=body: Client().generic(
                "POST", u, _json_text(b), content_type="application/json", **auth
            ),
            job,
        )
        problems += _problems_of_answer(outcome, True, name)
    assert not problems, "\n".join(problems)


def test_a_garbled_exit_report_is_kept_with_what_can_be_stored(running):
    """An exit report is never dropped (the worker would look alive until it is lost):
    what cannot be stored in it is left out instead."""
    job, auth = running
    client = Client()
    url = f"/api/v1/executor/jobs/{job.pk}/status"
    started = {"event": "started", "pid": 10**30}
    response = client.post(url, json.dumps(started), content_type="application/json", **auth)
    assert response.status_code == 200, response.content
    exited = {"event": "exited", "outcome": "failed", "exit_code": 10**30, "reason": "oom\x00!"}
    response = client.post(url, json.dumps(exited), content_type="application/json", **auth)
    assert response.status_code == 200, response.content
    worker = job.worker_set.get()
    assert (worker.state, worker.child_pid, worker.exit_code, worker.reason) == (
        "failed",
        None,
        None,
        "oom!",
    )


def test_an_executor_body_over_the_upload_limit_is_refused(running, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    job, auth = running
    lines = [{"seq": i + 1, "stream": "stdout", "text": "x" * 100} for i in range(200)]
    outcome = probe(
        lambda: Client().generic(
            "POST",
            f"/api/v1/executor/jobs/{job.pk}/logs",
            json.dumps({"lines": lines}),
            content_type="application/json",
            **auth,
        ),
        job,
    )
    assert not refusal_problems(outcome), outcome.show()


def test_hostile_artifact_uploads_are_refused(running):
    job, auth = running
    data = b"weights"
    digest = hashlib.sha256(data).hexdigest()
    cases = {
        "dotdot": ("../../evil", data, digest, "0"),
        "inner-dotdot": ("a/../../evil", data, digest, "0"),
        "encoded-dotdot": ("%2e%2e/%2e%2e/evil", data, digest, "0"),
        "absolute": ("/etc/passwd", data, digest, "0"),
        "backslashes": ("..\\..\\evil", data, digest, "0"),
        "nul": ("evil%00.txt", data, digest, "0"),
        "huge-name": ("n" * 2000, data, digest, "0"),
        "checksum-wrong": ("out.bin", data, "0" * 64, "0"),
        "checksum-missing": ("out.bin", data, "", "0"),
        "another-worker": ("out.bin", data, digest, "1"),
    }
    problems = []
    for name, (path, body, sha, worker) in cases.items():
        outcome = probe(
            lambda p=path, b=body, s=sha, k=worker: Client().generic(
                "PUT",
                f"/api/v1/executor/jobs/{job.pk}/artifacts/{p}",
                b,
                content_type="application/octet-stream",
                HTTP_X_GANTRY_SHA256=s,
                HTTP_X_GANTRY_WORKER=k,
                **auth,
            ),
            job,
        )
        problems += _problems_of_answer(outcome, True, name)
    assert not problems, "\n".join(problems)
