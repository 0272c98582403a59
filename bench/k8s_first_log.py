#!/usr/bin/env python
"""Submit -> first log line of a job in a real pod on the real node, cold and warm, beside
the same job on the local backend in the same run.

    python bench/k8s_first_log.py [--warm 5] [--local 5] [--out bench/results/k8s_first_log.json]

Setup: what tests/jobs/test_k8s_real_node.py starts (its fixtures, imported here): the
control plane with kwok's GPU nodes, the real node (kubelet + containerd + runc), the test
registry holding the Python image (platform/dev/images-build), and Gantry on the cluster
as its ServiceAccount, its API served by pytest-django's live server, in this process.
The script runs itself under pytest for those fixtures.

Each job runs `python -c "print('first line')"`. This process plays the background
worker (submit, admission pass, launch: the launch pool's creates), then polls every
20 ms: the pod's node (scheduled), the container running, the job `running` (the
executor fetched its spec, started the command and said so) and the job's first log
chunk in the database (the executor shipped the line over HTTP). The phases:

* launch: submit -> the Kubernetes Job created (Gantry's part: admission, manifests, API);
* schedule: -> the pod bound to the node (Job controller, scheduler);
* start: -> the container running (kubelet: sandbox, image pull if cold, runc);
* executor: -> the job running (the executor's start inside the pod);
* first_log: submit -> the command's line stored (the whole path; the executor's own
  "[gantry] …" lines do not count).

Cold: the image is removed from the node first (`ctr images rm --sync`), so the first job
pulls it from the registry (on loopback). Warm: the next `--warm` jobs, image present.
Baseline: the same command on the local backend (a sandboxed process), `--local` jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from measure import percentile  # noqa: E402

if __name__ != "__main__":  # imported by pytest (main() below), Django configured by then
    from tests.conftest import *  # noqa: F403 (the tests' fixtures: owner and what it needs)
    from tests.jobs.test_k8s_live import finish_launches
    from tests.jobs.test_k8s_real_node import (  # noqa: F401 (pytest fixtures)
        gantry,
        real_node,
        real_tenant,
    )

pytestmark = pytest.mark.django_db(transaction=True)
COMMAND = "python -c \"print('first line', flush=True)\""
POLL = 0.02
WAIT = 180


def poll_phases(job, pods, began: float) -> dict[str, float]:
    """Seconds from `began` to each phase reached, polling every POLL s."""
    from jobs.models import Job, LogChunk

    seen: dict[str, float] = {}
    deadline = time.monotonic() + WAIT
    while "first_log" not in seen:
        now = time.monotonic() - began
        if pods is not None and ("scheduled" not in seen or "started" not in seen):
            found = pods(job)
            if found and found[0].spec.node_name:
                seen.setdefault("scheduled", now)
            statuses = found[0].status.container_statuses if found else None
            if statuses and (statuses[0].state.running or statuses[0].state.terminated):
                seen.setdefault("started", now)
        state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).get()
        if state in ("running", "succeeded"):
            seen.setdefault("running", now)
        chunks = LogChunk.objects.filter(job_id=job.pk)
        if any(line["text"] == "first line" for c in chunks for line in c.lines()):
            seen["first_log"] = now  # the command's own line, not the executor's
        if state in ("failed", "lost", "cancelled"):
            raise AssertionError(f"job {job.pk} {state}")
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job.pk}: only {sorted(seen)} within {WAIT} s")
        time.sleep(POLL)
    return seen


def one_job(owner, project, pods) -> dict[str, float]:
    from jobs.services.launch import launch_job
    from jobs.services.submit import submit_job
    from scheduling.admission import admission_pass

    began = time.monotonic()
    job = submit_job(owner, project, name="first-log", cpus=1, memory_mb=512, command=COMMAND)
    admission_pass()
    job.refresh_from_db()
    assert launch_job(job), job.state_reason
    if pods is not None:
        finish_launches()
    launched = time.monotonic() - began
    phases = poll_phases(job, pods, began)
    return {"launched": launched, **phases}


def summary(runs: list[dict[str, float]]) -> dict:
    keys = [k for k in ("launched", "scheduled", "started", "running", "first_log") if k in runs[0]]
    return {
        k: {
            "p50_s": round(statistics.median(r[k] for r in runs), 3),
            "p99_s": round(percentile([r[k] for r in runs], 99), 3),
            "max_s": round(max(r[k] for r in runs), 3),
        }
        for k in keys
    } | {"runs": runs}


def test_first_log_line(gantry, real_node, owner, settings):
    from jobs.compute import reset_backends

    options = json.loads(os.environ["BENCH_OPTIONS"])
    _, node, registry, pushed = real_node
    project, _ = real_tenant(gantry, owner, registry, "bench")

    node.ctr("images", "rm", "--sync", pushed)
    assert pushed not in node.ctr("images", "ls", "-q")
    cold = one_job(owner, project, gantry.admin.pods)
    warm = [one_job(owner, project, gantry.admin.pods) for _ in range(options["warm"])]

    settings.GANTRY_JOB_BACKEND = "local"
    reset_backends()
    local = [one_job(owner, project, None) for _ in range(options["local"])]

    # Every job to its end (the executors' last reports), before the fixtures go.
    from jobs.models import Job

    deadline = time.monotonic() + WAIT
    while Job.objects.exclude(state__in=("succeeded", "failed", "lost", "cancelled")).exists():
        assert time.monotonic() < deadline, "jobs still running"
        time.sleep(0.2)

    warm_p50 = statistics.median(r["first_log"] for r in warm)
    local_p50 = statistics.median(r["first_log"] for r in local)
    result = {
        "benchmark": "k8s_first_log",
        "command": COMMAND,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "image": pushed,
        # Pods on the node's pod network (CNI bridge in its own network namespace), reaching
        # Gantry through a relay (tests/k8s_node.py); before 2026-12-05 the host's network.
        "pod_network": "bridge",
        "cold": summary([cold]),
        "warm": summary(warm),
        "local": summary(local),
        "ratio_warm_pod_to_local_first_log_p50": round(warm_p50 / local_p50, 2),
        "cold_minus_warm_first_log_s": round(cold["first_log"] - warm_p50, 3),
    }
    out = Path(options["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("cold", "warm", "local")}))
    for name in ("cold", "warm", "local"):
        print(name, {k: v for k, v in result[name].items() if k != "runs"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--local", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results" / "k8s_first_log.json"))
    args = parser.parse_args()
    os.environ["BENCH_OPTIONS"] = json.dumps(vars(args) | {"out": str(Path(args.out).resolve())})
    os.chdir(ROOT)
    sys.exit(
        pytest.main([__file__, "-q", "-s", "-p", "no:randomly", "-p", "no:cacheprovider",
                     "-o", "addopts="])  # fmt: skip
    )


if __name__ == "__main__":
    main()
