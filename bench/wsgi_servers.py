"""Which WSGI server runs pages and the API: gunicorn (gthread) beside granian (WSGI),
each with the same processes and threads, on PostgreSQL + Redis with lab data.

    python bench/wsgi_servers.py [--seconds 10] [--scale 0.1]

Throughput and latency from wrk at 50 connections, straight to each server (no proxy),
for a bare view (/healthz) and the job list API. Writes bench/results/wsgi_servers.json.
Needs the `bench` extra (granian) and wrk (Debian's package).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import free_port, run, wait_http, wrk

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "gantry_bench_wsgi"


def servers(port, processes, threads):
    python = sys.executable
    return {
        "gunicorn_gthread": [
            python, "-m", "gunicorn", "config.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--worker-class", "gthread", "--workers", str(processes), "--threads", str(threads),
            "--no-control-socket",
        ],
        "granian_wsgi": [
            python, "-m", "granian", "--interface", "wsgi", "config.wsgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(processes),
            "--blocking-threads", str(threads), "--no-ws",
        ],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="each server this many times, alternating")
    args = parser.parse_args()

    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    work = Path(tempfile.mkdtemp(prefix="gantry-bench-wsgi-"))
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        "REDIS_URL": "redis://127.0.0.1:6379/12",
        "GANTRY_DATA_DIR": str(work),
        "SECRET_KEY": "bench-" + "x" * 50,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    run(sys.executable, "manage.py", "migrate", "--noinput", "-v0", env=env)
    credentials = work / "credentials.txt"
    s = args.scale
    run(sys.executable, "manage.py", "seed_lab", f"--tenants={max(1, int(100 * s))}",
        f"--projects={max(1, int(1000 * s))}", f"--users={max(1, int(300 * s))}",
        f"--jobs={int(100_000 * s)}", f"--datasets={int(10_000 * s)}",
        f"--tokens-file={credentials}", env=env)
    token = credentials.read_text().split("\n")[0].split()[1]

    results = {}
    port = free_port()
    # Alternating rounds: the machine's other load (shared cores) falls on both servers.
    rounds = [item for _ in range(args.rounds) for item in servers(port, args.processes, args.threads).items()]
    for round_no, (name, cmd) in enumerate(rounds):
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            host = f"http://127.0.0.1:{port}"
            wait_http(host + "/healthz")
            wrk(host + "/healthz", 2, 10)  # warm every process
            bare = wrk(host + "/healthz", args.seconds, 50)
            jobs = wrk(host + "/api/v1/jobs/?page_size=50", args.seconds, 50,
                       [f"Authorization: Bearer {token}"])
            results.setdefault(name, []).append({
                "round": round_no // 2 + 1, "bare_view": bare, "job_list_api": jobs,
                "job_list_vs_bare": round(jobs["requests_per_s"] / bare["requests_per_s"], 3)})
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(20)
            time.sleep(1)

    result = {
        "generated_by": "bench/wsgi_servers.py",
        "machine": {"cpus": os.cpu_count()},
        "settings": {"processes": args.processes, "threads": args.threads, "seconds": args.seconds,
                     "jobs": int(100_000 * s), "database": "postgresql", "cache": "redis",
                     "wrk_connections": 50},
        "servers": results,
    }
    out = ROOT / "bench" / "results" / "wsgi_servers.json"
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
