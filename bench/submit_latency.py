#!/usr/bin/env python
"""Submit -> running as a user sees it, through the real worker queue, on both brokers.

    python bench/submit_latency.py [--jobs 30] [--quiet-jobs 5] [--brokers orm,redis]
                                   [--out bench/results/submit_latency.json]

For each broker (django-q's ORM broker on SQLite, the embedded default; and Redis with
REDIS_URL=redis://127.0.0.1:6379/9, flushed first) a fresh data directory is migrated and
three real processes start: uvicorn (pages, API, the executors' endpoints), `manage.py
qcluster` (the worker: the submit's kick -> admission pass -> launch of `python -m
executor`), and this client. Each sample is `POST /api/v1/jobs/` with a personal token,
then `GET /api/v1/jobs/<id>/` every 10 ms until the job reads `running` (the executor has
started the command and reported it). Jobs run one at a time:
- sequential (--jobs): each submit 1.5 s after the previous job finished (a quiet gap
  longer than the broker's poll and the Redis kick interval, GANTRY_ADMISSION_KICK_SECONDS);
- first_after_idle (--quiet-jobs): each submit after 10 s of nothing: must not wait for
  a timer either;
- back_to_back (--quiet-jobs): each submit 0.1 s after the previous finished, when the
  finished job's own kick has just run a pass (kicks may coalesce here; for information).
Baseline: a bare `subprocess.Popen` of the same command, timed to its first output line.
Overhead = Gantry's p50 (p99) minus the baseline's p50 (p99). Goal: p50 overhead < 300 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
from measure import free_port, percentile

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python -c \"print('hello', flush=True)\""
BARE = [sys.executable, "-c", "print('hello', flush=True)"]
REDIS_URL = "redis://127.0.0.1:6379/9"
SETUP = """
from django.contrib.auth import get_user_model
from accounts.services import create_api_token, create_tenant
from projects.services import create_project
user = get_user_model().objects.create_user("bench", password="bench-password-1")
tenant = create_tenant(actor=user, name="Bench", slug="bench")
project = create_project(actor=user, tenant=tenant, name="Bench", slug="bench")
token, secret = create_api_token(actor=user, name="bench", scope="write")
print(project.pk, secret)
"""


def summary(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "mean_ms": round(statistics.fmean(ms), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def stage_times(job: dict) -> dict:
    """Seconds from the submit to each state the job's timeline recorded (server clock)."""
    created = datetime.fromisoformat(job["created_at"])
    return {
        f"to_{event['to_state']}": (datetime.fromisoformat(event["at"]) - created).total_seconds()
        for event in job["events"]
        if event["to_state"] in ("admitted", "starting", "running")
    }


def bare_popen(n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        proc = subprocess.Popen(BARE, stdout=subprocess.PIPE)
        proc.stdout.readline()
        times.append(time.perf_counter() - start)
        proc.wait()
    return times


def start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_broker(broker: str, jobs: int, quiet_jobs: int) -> dict:
    data = Path(tempfile.mkdtemp(prefix=f"gantry-submit-{broker}-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_URL": url,
        "GANTRY_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "GANTRY_WORKERS": "1",
        "GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS": "30",
    }
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if broker == "redis":
        env["REDIS_URL"] = REDIS_URL
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run(
        [*manage, "shell", "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True
    )
    project, secret = out.stdout.decode().split()[-2:]
    web = start(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
        + ["--port", str(port), "--no-access-log", "--lifespan", "off", "--log-level", "warning"],
        env,
        data / "web.log",
    )
    worker = start([*manage, "qcluster"], env, data / "qcluster.log")
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                api.get("/api/v1/projects/")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

        def one() -> float:
            start_at = time.perf_counter()
            answer = api.post(
                "/api/v1/jobs/", json={"project": int(project), "name": "bench", "command": COMMAND}
            )
            answer.raise_for_status()
            job = answer.json()["id"]
            running = None
            while True:
                state = api.get(f"/api/v1/jobs/{job}/").json()["state"]
                if running is None and state in ("running", "succeeded"):
                    running = time.perf_counter() - start_at
                if state in ("succeeded", "failed", "lost", "cancelled", "timed_out"):
                    if state != "succeeded":
                        raise RuntimeError(f"job {job} {state}: {(data / 'qcluster.log')}")
                    stages.append(stage_times(api.get(f"/api/v1/jobs/{job}/").json()))
                    return running
                time.sleep(0.01 if running is None else 0.05)

        stages: list[dict] = []
        time.sleep(3)  # the worker's start-up pass and schedules settle
        for _ in range(3):  # warm up: imports, page cache, first connections
            one()
        stages.clear()
        samples = {"sequential": [], "first_after_idle": [], "back_to_back": []}
        for _ in range(jobs):
            time.sleep(1.5)
            samples["sequential"].append(one())
        for _ in range(quiet_jobs):
            time.sleep(10)
            samples["first_after_idle"].append(one())
        for _ in range(quiet_jobs):
            time.sleep(0.1)
            samples["back_to_back"].append(one())
    finally:
        api.close()
        stop(worker)
        stop(web)
        shutil.rmtree(data, ignore_errors=True)
    return samples, stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--quiet-jobs", type=int, default=5)
    parser.add_argument("--brokers", default="orm,redis")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "submit_latency.json"))
    args = parser.parse_args()

    bare_popen(3)
    baseline = summary(bare_popen(args.jobs))
    result = {
        "benchmark": "POST /api/v1/jobs/ -> job reads running in the API, through django-q",
        "command": COMMAND,
        "bare_popen_to_first_line": baseline,
        "target_overhead_p50_ms": 300,
        "load_average_at_start": os.getloadavg(),
        "brokers": {},
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }
    for broker in args.brokers.split(","):
        samples, stages = run_broker(broker, args.jobs, args.quiet_jobs)
        entry = {
            "server_timeline_p50_ms": {
                name: round(percentile([s[name] for s in stages if name in s], 50) * 1000, 1)
                for name in ("to_admitted", "to_starting", "to_running")
            }
        }
        for case, values in samples.items():
            s = summary(values)
            s["overhead_p50_ms"] = round(s["p50_ms"] - baseline["p50_ms"], 1)
            s["overhead_p99_ms"] = round(s["p99_ms"] - baseline["p99_ms"], 1)
            s["meets_target"] = s["overhead_p50_ms"] < 300
            entry[case] = s
        result["brokers"][broker] = entry
        print(broker, json.dumps(entry), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
