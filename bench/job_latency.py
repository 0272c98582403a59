#!/usr/bin/env python
"""Submit-to-running latency of a trivial job on the local backend.

    python bench/job_latency.py [--jobs 100] [--out bench/results/job_latency.json]

Setup: a fresh data directory (SQLite, files), `manage.py migrate`, and a real
uvicorn process serving Gantry on a free port. This process plays the
background worker: it submits a job (`submit_job`), runs the admission pass and
launch right away (what the `kick` after a submit does in django-q), and polls
the database until the job is `running`, i.e. until the executor has fetched
the spec, started the command and reported it. Jobs run one after another so
capacity never delays admission.

Baseline: the same command started with bare `subprocess.Popen`, timed to the
child's first output line. The difference is Gantry's overhead: admission,
launching the executor (a Python interpreter), spec fetch, log-sequence probes
and the `started` report over HTTP.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from measure import free_port, percentile

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-c", "print('hello', flush=True)"]


def summary(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {
        "p50_ms": round(percentile(ms, 50), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "mean_ms": round(statistics.fmean(ms), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def bare_popen(n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        proc = subprocess.Popen(COMMAND, stdout=subprocess.PIPE)
        proc.stdout.readline()
        times.append(time.perf_counter() - start)
        proc.wait()
    return times


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # any answer means it is up
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "job_latency.json"))
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="gantry-bench-"))
    port = free_port()
    env = {
        **os.environ,
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_URL": f"http://127.0.0.1:{port}",
        "GANTRY_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS": "30",
    }
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--lifespan",
            "off",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/accounts/login/")
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from accounts import services as account_services
        from jobs.models import Job
        from jobs.services.submit import submit_job
        from projects import services as project_services
        from scheduling import tasks

        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        tenant = account_services.create_tenant(actor=user, name="Bench", slug="bench")
        project = project_services.create_project(
            actor=user, tenant=tenant, name="Bench", slug="bench"
        )
        command = "python -c \"print('hello', flush=True)\""

        def one() -> float:
            start = time.perf_counter()
            job = submit_job(user, project, name="bench", command=command)
            tasks.admit_and_launch()
            while True:
                state = Job.objects.values_list("state", flat=True).get(pk=job.pk)
                if state in ("running", "succeeded"):
                    elapsed = time.perf_counter() - start
                    break
                if state in ("failed", "lost", "cancelled", "timed_out"):
                    raise RuntimeError(
                        f"job {job.pk} {state}: {Job.objects.get(pk=job.pk).state_reason}"
                    )
                time.sleep(0.002)
            while Job.objects.values_list("state", flat=True).get(pk=job.pk) not in (
                "succeeded",
                "failed",
            ):
                time.sleep(0.01)
            return elapsed

        for _ in range(3):  # warm up: imports, page cache, first connections
            one()
            bare_popen(1)
        gantry = [one() for _ in range(args.jobs)]
        baseline = bare_popen(args.jobs)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(data, ignore_errors=True)

    g, b = summary(gantry), summary(baseline)
    result = {
        "benchmark": "job submit-to-running latency, local backend, embedded default (SQLite)",
        "jobs": args.jobs,
        "command": command,
        "gantry_submit_to_running": g,
        "bare_popen_to_first_line": b,
        "overhead_p50_ms": round(g["p50_ms"] - b["p50_ms"], 1),
        "overhead_p99_ms": round(g["p99_ms"] - b["p99_ms"], 1),
        "target_overhead_p50_ms": 300,
        "meets_target": g["p50_ms"] - b["p50_ms"] < 300,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
