"""Gantry under a lab's load: PostgreSQL, Redis, the production stack (`manage.py serve
--production`: nginx in front of gunicorn for pages and the API and uvicorn for
websockets), the background worker, lab-scale data, and a realistic mix at 50 and 200 users.

    python bench/load.py [--users 50 200] [--seconds 180] [--scale 1.0]

Writes bench/results/load.json and bench/results/load.md. Needs PostgreSQL and Redis
on their usual local ports, locust (the `bench` extra) and wrk (Debian's package) for
the throughput ceiling. Numbers from a shared 2-core machine are noisy: the load
generator and the server share the cores, so read ratios rather than absolutes.
"""

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from measure import free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DB_NAME = "gantry_bench"


def run(*cmd, env, **kw):
    return subprocess.run(cmd, cwd=ROOT, env=env, check=True, **kw)


def wait_http(url, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {timeout} s")


def wrk(url, seconds, connections, headers=()):
    """Requests per second and latency percentiles from wrk, or None when wrk is missing."""
    if not shutil.which("wrk"):
        return None
    cmd = ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    for header in headers:
        cmd[1:1] = ["-H", header]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+\w+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests_per_s": rps, "latency": lat, "non_2xx": int(errors.group(1)) if errors else 0}


def api(host, token, path, body=None):
    request = urllib.request.Request(
        host + path, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def wait_for_state(host, token, job, states, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = api(host, token, f"/api/v1/jobs/{job}/")["state"]
        if state in states:
            return state
        time.sleep(0.5)
    raise SystemExit(f"job {job} did not reach {states} within {timeout} s (last: {state})")


def hold_the_gpu(host, token, project):
    """Start the job that holds the machine's one (pretended) GPU, so the jobs the
    simulated users submit wait in the queue instead of running here (bench/settings.py)."""
    job = api(host, token, "/api/v1/jobs/", {"project": project, "name": "holds the GPU",
                                               "command": "sleep 3600", "gpus": 1})["id"]
    wait_for_state(host, token, job, {"running"})
    return job


def locust(host, users, seconds, credentials, env, prefix):
    cmd = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "locustfile.py"), "--headless",
        "-u", str(users), "-r", str(max(1, users // 5)), "-t", f"{seconds}s", "--host", host,
        "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING",
    ]
    try:  # locust writes its CSV files as it goes: a hung run still leaves its numbers
        subprocess.run(cmd, cwd=ROOT, env={**env, "GANTRY_BENCH_CREDENTIALS": str(credentials)}, check=False,
                       stdout=subprocess.DEVNULL, timeout=seconds + 120)
    except subprocess.TimeoutExpired:
        print(f"locust did not stop after {seconds} s; its last numbers are used", file=sys.stderr)
    rows = {}
    with open(f"{prefix}_stats.csv") as fh:
        for row in csv.DictReader(fh):
            name = row["Name"]
            rows[name] = {
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "requests_per_s": round(float(row["Requests/s"]), 1),
                "p50_ms": float(row["50%"] or 0),
                "p95_ms": float(row["95%"] or 0),
                "p99_ms": float(row["99%"] or 0),
            }
    failures = []
    if os.path.exists(f"{prefix}_failures.csv"):
        with open(f"{prefix}_failures.csv") as fh:
            failures = [dict(r) for r in csv.DictReader(fh)][:10]
    return {"users": users, "seconds": seconds, "endpoints": rows, "failure_samples": failures}


def verdict(result):
    """Each target with what was measured: p99 of list and detail endpoints at 50 users,
    the job list's share of the bare view's throughput, failures at 200 users."""
    out = {}
    mixes = {m["users"]: m for m in result["mixes"]}
    if 50 in mixes:
        rows = {n: r for n, r in mixes[50]["endpoints"].items() if "list" in n or "detail" in n}
        worst = max(rows, key=lambda n: rows[n]["p99_ms"]) if rows else None
        measured = rows[worst]["p99_ms"] if worst else None
        out["p99 ms of list and detail endpoints at 50 users"] = {
            "measured": f"{measured} ({worst})", "target": "< 100", "met": measured is not None and measured < 100}
    ratio = result["ceiling_wrk_15s_50_connections"].get("job_list_vs_bare")
    if ratio is not None:
        out["job list throughput / bare view"] = {"measured": ratio, "target": ">= 0.25", "met": ratio >= 0.25}
    if 200 in mixes:
        failures = sum(r["failures"] for n, r in mixes[200]["endpoints"].items() if n != "Aggregated")
        out["failed requests at 200 users"] = {"measured": failures, "target": 0, "met": failures == 0}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, nargs="+", default=[50, 200])
    # Three minutes: an endpoint gets 300-1,300 requests, so its p99 is not one unlucky request.
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the lab-scale data set")
    # gunicorn processes and threads in each (manage.py serve --production).
    parser.add_argument("--web-workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")

    work = Path(tempfile.mkdtemp(prefix="gantry-bench-"))
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        "REDIS_URL": "redis://127.0.0.1:6379/13",
        "GANTRY_DATA_DIR": str(work),
        "SECRET_KEY": "bench-" + "x" * 50,
        "DEBUG": "false",
        "GANTRY_URL": f"http://127.0.0.1:{port}",
        "GANTRY_NOTEBOOK_PORT": str(free_port()),
        "GANTRY_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "bench.settings",  # one GPU, held by the first job
    }
    subprocess.run(["redis-cli", "-n", "13", "flushdb"], check=False, stdout=subprocess.DEVNULL)
    run(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    credentials = work / "credentials.txt"
    scale = args.scale
    started = time.monotonic()
    run(sys.executable, "manage.py", "seed_lab", f"--tenants={int(100 * scale)}", f"--projects={int(1000 * scale)}",
        f"--users={int(300 * scale)}", f"--jobs={int(100_000 * scale)}", f"--datasets={int(10_000 * scale)}",
        f"--tokens-file={credentials}", env=env)
    seed_seconds = round(time.monotonic() - started, 1)

    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--production", "--port", str(port),
         "--web-workers", str(args.web_workers), "--threads", str(args.threads)],
        cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    host = f"http://127.0.0.1:{port}"
    holder = None
    try:
        wait_http(host + "/healthz")
        username, token, _, projects = credentials.read_text().split("\n")[0].split()
        holder = hold_the_gpu(host, token, int(projects.split(",")[0]))
        jobs_url, auth = host + "/api/v1/jobs/?page_size=50", [f"Authorization: Bearer {token}"]
        ceiling = {
            "bare_view": wrk(host + "/healthz", 15, 50),
            # Computed afresh for every request: no response cache.
            "job_list_api": wrk(jobs_url, 15, 50, auth),
            # One request at a time: its latency is the server's time per job list.
            "job_list_api_one_at_a_time": wrk(jobs_url, 10, 1, auth),
        }
        if ceiling["bare_view"] and ceiling["job_list_api"]:
            bare = ceiling["bare_view"]["requests_per_s"]
            ceiling["job_list_vs_bare"] = round(ceiling["job_list_api"]["requests_per_s"] / bare, 3)
        mixes = [locust(host, users, args.seconds, credentials, env, work / f"locust-{users}") for users in args.users]
    finally:
        if holder is not None:
            api(host, token, f"/api/v1/jobs/{holder}/cancel/", {})
            wait_for_state(host, token, holder, {"cancelled", "failed", "succeeded"})
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)

    result = {
        "generated_by": "bench/load.py",
        "machine": {"cpus": os.cpu_count()},
        "data": {"scale": scale, "tenants": int(100 * scale), "projects": int(1000 * scale), "jobs": int(100_000 * scale),
                 "datasets": int(10_000 * scale), "seed_seconds": seed_seconds},
        "server": {"proxy": "nginx", "wsgi": "gunicorn gthread", "asgi": "uvicorn", "web_workers": args.web_workers,
                   "threads": args.threads, "database": "postgresql", "channel_layer": "redis"},
        "ceiling_wrk_15s_50_connections": ceiling,
        "mixes": mixes,
        "targets": {"p99_ms_list_detail_at_50": 100, "job_list_vs_bare_min": 0.25, "errors_at_200": 0},
    }
    result["verdict"] = verdict(result)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "load.json").write_text(json.dumps(result, indent=1))
    lines = ["# Load benchmark", "", f"Data: {result['data']}", ""]
    if ceiling.get("bare_view"):
        lines.append(f"Ceiling (wrk, 50 connections): bare view {ceiling['bare_view']['requests_per_s']} req/s; "
                     f"job list API (computed afresh) {ceiling['job_list_api']['requests_per_s']} req/s; "
                     f"ratio {ceiling.get('job_list_vs_bare')}. One at a time, a job list takes "
                     f"{ceiling['job_list_api_one_at_a_time']['latency'].get('50')} (p50).")
    for mix in mixes:
        lines += ["", f"## {mix['users']} users, {mix['seconds']} s", "", "| endpoint | requests | failures | req/s | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
        for name, row in mix["endpoints"].items():
            lines.append(f"| {name} | {row['requests']} | {row['failures']} | {row['requests_per_s']} | {row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']} |")
    lines += ["", "## Against the targets", ""]
    lines += [f"- {name}: {v['measured']} (target {v['target']}) {'met' if v['met'] else 'NOT met'}"
              for name, v in result["verdict"].items()]
    (RESULTS / "load.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
