#!/usr/bin/env python
"""MLflow's run search over 10,000 runs, against Gantry, on SQLite or PostgreSQL.

    python bench/mlflow_search.py [--runs 10000] [--reps 15]
        [--database-url postgres://postgres@127.0.0.1:5432/gantry_bench_search]
        [--out bench/results/mlflow_search_<vendor>.json]

Setup (not timed): a fresh data directory (SQLite) or a fresh database (PostgreSQL: the
database in --database-url is dropped and made again), `manage.py migrate`, a user,
tenant, project and project-limited write token, and --runs runs in the project's
default experiment, written with the ORM as bench/mlflow_tracking.py writes them (a
metric `acc` and a param `lr` each; then ANALYZE). One uvicorn process serves Gantry.

Measured, each search asking for 100 results, --reps times after 3 warm-ups, median and
p90 (ms):
  http     the REST call alone (POST /api/2.0/mlflow/runs/search, JSON read back);
  client   MlflowClient.search_runs (mlflow-skinny, pinned): the call plus the client
           turning 100 runs into entities;
  sql      the search's own query, run in this process (the ORM, no HTTP);
and the database's plan for that query (EXPLAIN; ANALYZE on PostgreSQL).
The goal (issue 23): the search over 10,000 runs answers in under 200 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from measure import free_port, percentile

ROOT = Path(__file__).resolve().parent.parent
SEARCHES = {
    "filter_metric_and_param_order_by_metric": (
        "metrics.acc > 0.9 and params.lr = '0.01'",
        ["metrics.acc DESC"],
    ),
    "no_filter_newest_first": ("", []),
    "order_by_metric_only": ("", ["metrics.acc DESC"]),
    "filter_param_only": ("params.lr = '0.1'", []),
    "filter_metric_range": ("metrics.acc >= 0.25 and metrics.acc < 0.5", ["metrics.acc ASC"]),
}


def stats(ms: list[float]) -> dict:
    return {"median_ms": round(statistics.median(ms), 1), "p90_ms": round(percentile(ms, 90), 1)}


def timed(call, reps: int) -> list[float]:
    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def fresh_postgres(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="gantry-mlflow-search-"))
    env = {
        **os.environ,
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    env.pop("DATABASE_URL", None)
    if args.database_url:
        fresh_postgres(args.database_url)
        env["DATABASE_URL"] = args.database_url
    os.environ.clear()
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import mlflow
    import requests
    from django.contrib.auth import get_user_model
    from django.db import connection
    from mlflow_tracking import gantry_search_runs

    from accounts import services as account_services
    from projects import services as project_services
    from tracking import search
    from tracking.models import Run
    from tracking.services.access import default_experiment

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    tenant = account_services.create_tenant(actor=user, name="Bench", slug="bench")
    project = project_services.create_project(actor=user, tenant=tenant, name="Bench", slug="b")
    _, token = account_services.create_api_token(
        actor=user, name="bench", scope="write", project=project
    )
    experiment = default_experiment(project)
    gantry_search_runs(experiment.pk, args.runs)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    vendor = connection.vendor

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
        + ["--port", str(port), "--no-access-log", "--lifespan", "off", "--log-level", "warning"],
        cwd=ROOT,
        env={**env, "GANTRY_URL": url},
    )
    result: dict = {
        "benchmark": "MLflow run search over many runs (Gantry)",
        "database": vendor,
        "runs": args.runs,
        "results_per_search": 100,
        "client": f"mlflow-skinny {mlflow.__version__}",
        "server": "uvicorn, 1 process",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared; load average "
        f"{os.getloadavg()[0]:.1f} at start)",
        "goal_ms": 200,
        "searches": {},
    }
    try:
        for _ in range(240):
            try:
                requests.get(f"{url}/healthz", timeout=2)
                break
            except requests.ConnectionError:
                time.sleep(0.5)
        os.environ["MLFLOW_TRACKING_TOKEN"] = token
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        client = mlflow.MlflowClient(tracking_uri=url)
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        experiment_id = str(experiment.pk)
        for name, (filter_string, order_by) in SEARCHES.items():
            body = {
                "experiment_ids": [experiment_id],
                "filter": filter_string,
                "max_results": 100,
                "order_by": order_by,
            }

            def http(body=body):
                answer = session.post(f"{url}/api/2.0/mlflow/runs/search", json=body, timeout=60)
                answer.raise_for_status()
                return answer.json()

            def with_client(filter_string=filter_string, order_by=order_by):
                return client.search_runs(
                    [experiment_id], filter_string, max_results=100, order_by=order_by
                )

            joins: dict = {}
            query = search.apply_order(
                search.apply_filter(
                    Run.objects.filter(experiment=experiment, lifecycle_stage="active"),
                    search.parse_filter(filter_string),
                    joins,
                ),
                order_by,
                joins,
            ).values_list("pk", flat=True)[:101]
            entry = {
                "filter": filter_string,
                "order_by": order_by,
                "results": len(http()["runs"]),
                "http": stats(timed(http, args.reps)),
                "client": stats(timed(with_client, args.reps)),
                "sql": stats(timed(lambda query=query: list(query.all()), args.reps)),
                "plan": query.explain(**({"analyze": True} if vendor == "postgresql" else {})),
            }
            result["searches"][name] = entry
            print(name, {k: entry[k] for k in ("results", "http", "client", "sql")}, flush=True)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    result["load_average_at_end"] = round(os.getloadavg()[0], 1)
    out = Path(args.out or ROOT / f"bench/results/mlflow_search_{vendor}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
