#!/usr/bin/env python
"""Gantry's MLflow API beside MLflow's own tracking server, driven by the same client.

    python bench/mlflow_tracking.py [--batches 100] [--chart-points 1000000]
        [--search-runs 10000] [--mlflow-python /path/to/venv-with-mlflow/bin/python]
        [--out bench/results/mlflow_tracking.json]

Setup: a fresh data directory (SQLite), `manage.py migrate`, a user, tenant, project and
a project-limited write token, and one uvicorn process serving Gantry. Beside it,
`mlflow server` with a SQLite backend store (`--workers 1`) from a virtualenv that has
the full `mlflow` package (`pip install mlflow==3.17.2`: the server's dependencies are
not in mlflow-skinny; 3.18.0's mlflow-tracing is not on the package index this was run
with). Both are driven by this virtualenv's pinned client (mlflow-skinny 3.18.0).

Measures:
  log_batch   --batches calls of MlflowClient.log_batch with 1,000 metrics each (the
              client's limit) into one run, after 5 warm-up calls: p50, p99, mean (ms).
  chart       one metric of --chart-points points (written straight into each store's
              tables, not timed), then the chart's read: get-history-bulk-interval
              (max_results=1000), cold and then the median of 5 (ms); Gantry answers a
              min/max envelope, MLflow its own step sampling.
  search      --search-runs runs in one experiment (Gantry only, written with the ORM),
              search_runs with a metric and a param filter, ordered by the metric,
              100 results: median of 5 (ms).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from measure import free_port, percentile

ROOT = Path(__file__).resolve().parent.parent


def wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def summary(ms: list[float]) -> dict:
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def bench_log_batch(client, experiment_id: str, batches: int) -> dict:
    from mlflow.entities import Metric

    run = client.create_run(experiment_id)
    now = int(time.time() * 1000)
    times = []
    for i in range(5 + batches):
        metrics = [Metric("loss", 1.0 / (1 + j), now + j, i * 1000 + j) for j in range(1000)]
        start = time.perf_counter()
        client.log_batch(run.info.run_id, metrics=metrics)
        if i >= 5:
            times.append((time.perf_counter() - start) * 1000)
    return summary(times)


def timed_get(url: str, headers: dict, reps: int = 5) -> dict:
    def once() -> tuple[float, int]:
        request = urllib.request.Request(url, headers=headers)
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as response:
            body = json.loads(response.read())
        return (time.perf_counter() - start) * 1000, len(body.get("metrics", body.get("runs", [])))

    cold, points = once()
    warm = [once()[0] for _ in range(reps)]
    return {
        "cold_ms": round(cold, 1),
        "median_ms": round(statistics.median(warm), 1),
        "points": points,
    }


def gantry_chart_points(run_id: str, n: int) -> None:
    from django.db import transaction

    from tracking.models import Run
    from tracking.services.metrics import Point, store_metrics

    run = Run.objects.get(run_id=run_id)
    now = int(time.time() * 1000)
    for start in range(0, n, 50_000):
        points = [
            Point("chart", 1.0 / (1 + s % 977), False, now + s, s)
            for s in range(start, min(n, start + 50_000))
        ]
        with transaction.atomic():
            store_metrics(run, points)


def mlflow_chart_points(db: Path, run_id: str, n: int) -> None:
    now = int(time.time() * 1000)
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, 0)",
            (("chart", 1.0 / (1 + s % 977), now + s, run_id, s) for s in range(n)),
        )
        conn.execute(
            "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?, ?, ?, ?, 0, ?)",
            ("chart", 1.0, now + n - 1, n - 1, run_id),
        )


def gantry_search_runs(experiment_id: int, n: int) -> None:
    from tracking.models import LatestMetric, Param, Run

    now = int(time.time() * 1000)
    runs = Run.objects.bulk_create(
        Run(experiment_id=experiment_id, name=f"r{i}", start_time=now + i, status="FINISHED")
        for i in range(n)
    )
    LatestMetric.objects.bulk_create(
        LatestMetric(run=r, key="acc", value=i / n, timestamp=now, step=0)
        for i, r in enumerate(runs)
    )
    Param.objects.bulk_create(
        Param(run=r, key="lr", value=("0.01", "0.001", "0.1")[i % 3]) for i, r in enumerate(runs)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--chart-points", type=int, default=1_000_000)
    parser.add_argument("--search-runs", type=int, default=10_000)
    parser.add_argument("--mlflow-python", default=os.environ.get("MLFLOW_SERVER_PYTHON", ""))
    parser.add_argument("--out", default=str(ROOT / "bench/results/mlflow_tracking.json"))
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="gantry-mlflow-bench-"))
    env = {
        **os.environ,
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    env.pop("DATABASE_URL", None)
    os.environ.update(env)
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("DATABASE_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import mlflow
    from django.contrib.auth import get_user_model

    from accounts import services as account_services
    from projects import services as project_services

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    tenant = account_services.create_tenant(actor=user, name="Bench", slug="bench")
    project = project_services.create_project(actor=user, tenant=tenant, name="Bench", slug="b")
    _, token = account_services.create_api_token(
        actor=user, name="bench", scope="write", project=project
    )
    os.environ["MLFLOW_TRACKING_TOKEN"] = token  # MLflow's server ignores it
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    auth = {"Authorization": f"Bearer {token}"}

    result: dict = {
        "benchmark": "MLflow client against Gantry's MLflow API and against `mlflow server`",
        "client": f"mlflow-skinny {mlflow.__version__}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared; load average {os.getloadavg()[0]:.1f} at start)",
        "targets": {"chart_1m_points_ms": 1000, "search_10k_runs_ms": 200},
        "servers": {},
    }
    servers = {}
    gantry_port = free_port()
    servers["gantry"] = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(gantry_port),
        ]
        + ["--no-access-log", "--lifespan", "off", "--log-level", "warning"],
        cwd=ROOT,
        env={**env, "GANTRY_URL": f"http://127.0.0.1:{gantry_port}"},
    )
    mlflow_db = data / "mlflow.db"
    if args.mlflow_python:
        mlflow_port = free_port()
        servers["mlflow"] = subprocess.Popen(
            [
                args.mlflow_python,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{mlflow_db}",
            ]
            + ["--default-artifact-root", str(data / "mlflow-artifacts"), "--host", "127.0.0.1"]
            + ["--port", str(mlflow_port), "--workers", "1"],
            cwd=data,
            env={k: v for k, v in env.items() if not k.startswith("MLFLOW_")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        urls = {"gantry": f"http://127.0.0.1:{gantry_port}"}
        if "mlflow" in servers:
            urls["mlflow"] = f"http://127.0.0.1:{mlflow_port}"
        for name, url in urls.items():
            wait_http(f"{url}/api/2.0/mlflow/experiments/search")
            if name == "mlflow":
                subprocess.run(
                    [args.mlflow_python, "-c", "import mlflow; print(mlflow.__version__)"],
                    check=True,
                    capture_output=True,
                )
                version = subprocess.run(
                    [args.mlflow_python, "-c", "import mlflow; print(mlflow.__version__)"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            client = mlflow.MlflowClient(tracking_uri=url)
            experiment_id = client.create_experiment(f"bench-{name}")
            entry = {
                "server": "uvicorn, 1 process, SQLite"
                if name == "gantry"
                else f"mlflow server {version}, --workers 1, SQLite"
            }
            entry["log_batch_1000_metrics"] = bench_log_batch(client, experiment_id, args.batches)
            print(name, "log_batch", entry["log_batch_1000_metrics"], flush=True)
            if args.chart_points:
                run = client.create_run(experiment_id)
                start = time.perf_counter()
                if name == "gantry":
                    gantry_chart_points(run.info.run_id, args.chart_points)
                else:
                    mlflow_chart_points(mlflow_db, run.info.run_id, args.chart_points)
                chart_url = (
                    f"{url}/api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids={run.info.run_id}"
                    "&metric_key=chart&max_results=1000"
                )
                entry["chart"] = {
                    "points_stored": args.chart_points,
                    "write_s_untimed_setup": round(time.perf_counter() - start, 1),
                    **timed_get(chart_url, auth),
                }
                print(name, "chart", entry["chart"], flush=True)
            if name == "gantry" and args.search_runs:
                gantry_search_runs(int(experiment_id), args.search_runs)
                times = []
                for _ in range(6):
                    start = time.perf_counter()
                    found = client.search_runs(
                        [experiment_id],
                        "metrics.acc > 0.9 and params.lr = '0.01'",
                        max_results=100,
                        order_by=["metrics.acc DESC"],
                    )
                    times.append((time.perf_counter() - start) * 1000)
                entry["search_runs"] = {
                    "runs": args.search_runs,
                    "filter": "metrics.acc > 0.9 and params.lr = '0.01', order by metrics.acc DESC, 100 results",
                    "results": len(found),
                    "cold_ms": round(times[0], 1),
                    "median_ms": round(statistics.median(times[1:]), 1),
                }
                print(name, "search", entry["search_runs"], flush=True)
            result["servers"][name] = entry
    finally:
        for proc in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    result["load_average_at_end"] = round(os.getloadavg()[0], 1)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
