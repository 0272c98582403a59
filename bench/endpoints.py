#!/usr/bin/env python
"""Model endpoints: what Gantry's gateway costs, the cold start, and an alias switch.

    python bench/endpoints.py [--requests 4000] [--out bench/results/endpoints.json]
                              [--baseline /tmp/ep-base]

Setup: a fresh data directory (SQLite), `manage.py migrate`, Gantry under one uvicorn
process, the digits classifier (scikit-learn, saved by MLflow) uploaded as versions 1
and 2, an endpoint following the alias `champion` (no rate limit). Its replica is MLServer
in the local backend's sandbox, as in production.

Measured, in one run, with the same KServe v2 request (one 8x8 digit):
* latency p50/p99 and throughput through the gateway (`/serve/…`, token auth, routing,
  recording) and straight to the same replica's Unix socket, with 1 and 32 concurrent
  clients (asyncio + aiohttp, keep-alive: a load generator that costs little CPU, as
  it shares the machine), and the CPU spent per call by Gantry's process, the replica
  and the load generator;
* cold start from zero: the replicas stopped, then one request (its total time, and the
  start-to-ready time the gateway reports), five times;
* failed requests while the alias moves v1 -> v2 -> v1 under 8 concurrent clients.

With --baseline PATH (a checkout of another commit, e.g. `git worktree add /tmp/ep-base
HEAD~1`), a second uvicorn runs that checkout's Gantry over the same database and replica,
and its gateway is measured in the same rounds: before and after a change, side by side.
Each measurement is split into rounds that take the paths in turn (the order alternating),
so a neighbour's load on the machine falls on every path alike.

On a 2-core machine the load generator, Gantry and MLServer share the cores, so
throughput is bounded by the CPUs, not by the gateway alone; the JSON says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import free_port, percentile

ROOT = Path(__file__).resolve().parent.parent
ROW = [0, 0, 0.3, 0.8, 0.6, 0.1, 0, 0, 0, 0, 0.8, 0.9, 0.6, 0.9, 0.3, 0, 0, 0.2, 0.9, 0.1, 0, 0.7,
       0.5, 0, 0, 0.3, 0.8, 0, 0, 0.5, 0.5, 0, 0, 0.3, 0.5, 0, 0, 0.6, 0.5, 0, 0, 0.3, 0.7, 0, 0.1,
       0.8, 0.4, 0, 0, 0.1, 0.9, 0.3, 0.6, 0.8, 0, 0, 0, 0, 0.4, 0.8, 0.6, 0, 0, 0]  # fmt: skip
BODY = json.dumps(
    {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP64", "data": ROW}]}
).encode()


ROUNDS = 4


def stats(latencies: list[float], elapsed: float, failures: int) -> dict:
    ms = [v * 1000 for v in latencies]
    return {
        "requests": len(ms),
        "failed": failures,
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "throughput_rps": round(len(ms) / elapsed, 1),
    }


async def load(client, url: str, headers: dict, total: int, concurrency: int) -> tuple:
    """(latencies, elapsed seconds, failures) of `total` requests from `concurrency` clients."""
    latencies: list[float] = []
    failures = 0
    queue = iter(range(total))

    async def worker():
        nonlocal failures
        for _ in queue:
            start = time.perf_counter()
            try:
                async with client.post(url, data=BODY, headers=headers) as response:
                    await response.read()
                    ok = response.status == 200
            except Exception:
                ok = False
            latencies.append(time.perf_counter() - start)
            failures += not ok

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start, failures


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def compare(paths: dict, total: int, concurrency: int, replica_pids: list[int]) -> dict:
    """Each path's stats over `total` requests, taken in ROUNDS turns of alternating order
    after a warm-up of each; `paths` maps a name to (client, url, headers, pid). The CPU
    spent per request on each path: by the process `pid` (a Gantry) where there is one,
    by the replica's processes (`replica_pids`) and by this load generator."""
    for client, url, headers, _ in paths.values():
        await load(client, url, headers, 50, concurrency)
    seen = {name: ([], 0.0, 0) for name in paths}
    cpu = {name: [0.0, 0.0, 0.0] for name in paths}  # gantry, replica, load generator
    names = list(paths)

    def clocks(pid):
        return (
            cpu_seconds(pid) if pid else 0.0,
            sum(cpu_seconds(p) for p in replica_pids),
            time.process_time(),
        )

    for turn in range(ROUNDS):
        for name in names if turn % 2 == 0 else names[::-1]:
            client, url, headers, pid = paths[name]
            before_cpu = clocks(pid)
            latencies, elapsed, failures = await load(
                client, url, headers, total // ROUNDS, concurrency
            )
            for i, (start, end) in enumerate(zip(before_cpu, clocks(pid), strict=True)):
                cpu[name][i] += end - start
            before = seen[name]
            seen[name] = (before[0] + latencies, before[1] + elapsed, before[2] + failures)
    measured = {name: stats(*seen[name]) for name in names}
    for name in names:
        count = len(seen[name][0])
        gantry, replica, generator = (round(1000 * c / count, 2) for c in cpu[name])
        if paths[name][3]:
            measured[name]["gantry_cpu_ms_per_request"] = gantry
        measured[name]["replica_cpu_ms_per_request"] = replica
        measured[name]["load_generator_cpu_ms_per_request"] = generator
    return measured


def wait_http(url: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=4000, help="per client count and path")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "endpoints.json"))
    parser.add_argument("--baseline", help="a checkout whose gateway to measure alongside")
    args = parser.parse_args()

    load_before = [round(v, 2) for v in os.getloadavg()]
    data = Path(tempfile.mkdtemp(prefix="gantry-bench-"))
    port = free_port()
    env = {
        **os.environ,
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    def uvicorn(root, port):
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--no-access-log", "--lifespan", "off", "--log-level",
             "warning"],
            cwd=root, env=env,
        )  # fmt: skip

    server = uvicorn(ROOT, port)
    base_port = free_port() if args.baseline else None
    base_server = uvicorn(Path(args.baseline).resolve(), base_port) if args.baseline else None
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import aiohttp
    import httpx
    from django.contrib.auth import get_user_model

    from accounts import services as account_services
    from endpoints import local, services
    from jobs.compute.local import process_tree
    from modelhub import services as hub_services
    from projects import services as project_services
    from tests.endpoints.builders import train_digits_models, upload_mlflow_folder

    try:
        wait_http(f"http://127.0.0.1:{port}/accounts/login/")
        if base_server:
            wait_http(f"http://127.0.0.1:{base_port}/accounts/login/")
        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        tenant = account_services.create_tenant(actor=user, name="Bench", slug="bench")
        project = project_services.create_project(
            actor=user, tenant=tenant, name="Bench", slug="bench"
        )
        train_digits_models(data / "models")
        model = hub_services.create_model(user, project, name="digits")
        v1 = upload_mlflow_folder(user, model, data / "models" / "v1")
        v2 = upload_mlflow_folder(user, model, data / "models" / "v2")
        hub_services.set_alias(user, model, "champion", v1)
        endpoint = services.create_endpoint(
            user,
            project,
            name="digits",
            model=model,
            alias="champion",
            rate_limit=0,
            idle_seconds=0,
        )
        token = account_services.create_api_token(actor=user, name="bench", scope="write")[1]
        gateway = f"http://127.0.0.1:{port}{endpoint.gateway_path}v2/models/digits/infer"
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        first = httpx.post(gateway, content=BODY, headers=headers, timeout=120)
        assert first.status_code == 200, first.text
        replica = local.Replica(endpoint.pk, v1.pk)

        root = json.loads(replica.pid_file.read_text())["pid"]
        replica_pids = [pid for pid, _ in process_tree(root)]

        async def measure_paths() -> dict:
            fd = local.open_socket(replica)
            results: dict = {}
            json_headers = {"Content-Type": "application/json"}
            timeout = aiohttp.ClientTimeout(total=60)
            async with (
                aiohttp.ClientSession(timeout=timeout) as via_gateway,
                aiohttp.ClientSession(timeout=timeout) as via_baseline,
                aiohttp.ClientSession(
                    connector=aiohttp.UnixConnector(path=f"/proc/self/fd/{fd}"),
                    base_url="http://replica",
                    timeout=timeout,
                ) as direct,
            ):
                paths = {"gateway": (via_gateway, gateway, headers, server.pid)}
                if base_server:
                    base_url = gateway.replace(f":{port}/", f":{base_port}/")
                    paths["gateway_baseline"] = (via_baseline, base_url, headers, base_server.pid)
                paths["direct"] = (direct, "/v2/models/digits/infer", json_headers, None)
                for concurrency in (1, 32):
                    total = args.requests if concurrency == 1 else args.requests * 4
                    measured = await compare(paths, total, concurrency, replica_pids)
                    g, d = measured["gateway"], measured["direct"]
                    results[f"clients_{concurrency}"] = {
                        **measured,
                        "gateway_adds_p50_ms": round(g["p50_ms"] - d["p50_ms"], 2),
                        "gateway_throughput_loss_pct": round(
                            100 * (1 - g["throughput_rps"] / d["throughput_rps"]), 1
                        ),
                    }
                    if base_server:
                        b = measured["gateway_baseline"]
                        results[f"clients_{concurrency}"].update(
                            baseline_adds_p50_ms=round(b["p50_ms"] - d["p50_ms"], 2),
                            baseline_throughput_loss_pct=round(
                                100 * (1 - b["throughput_rps"] / d["throughput_rps"]), 1
                            ),
                        )
            os.close(fd)
            return results

        paths = asyncio.run(measure_paths())

        cold_total, cold_reported = [], []
        for _ in range(5):
            local.stop_all(endpoint.pk)
            start = time.perf_counter()
            answer = httpx.post(gateway, content=BODY, headers=headers, timeout=120)
            cold_total.append((time.perf_counter() - start) * 1000)
            assert answer.status_code == 200, answer.text
            cold_reported.append(float(answer.headers["Gantry-Cold-Start-Ms"]))

        async def during_switch() -> dict:
            seen: dict[str, int] = {}
            failures: list[str] = []
            stop = asyncio.Event()

            async def client_loop(http):
                while not stop.is_set():
                    try:
                        response = await http.post(gateway, content=BODY, headers=headers)
                        if response.status_code != 200:
                            failures.append(str(response.status_code))
                        version = response.headers.get("Gantry-Model-Version", "?")
                        seen[version] = seen.get(version, 0) + 1
                    except Exception as exc:
                        failures.append(repr(exc))

            async def wait_for(version):
                while (
                    await asyncio.to_thread(
                        lambda: type(endpoint).objects.get(pk=endpoint.pk).serving_version_id
                    )
                ) != version.pk:
                    await asyncio.sleep(0.1)
                await asyncio.sleep(3)  # the old replica drained and stopped meanwhile

            async with httpx.AsyncClient(timeout=120) as http:
                loops = [asyncio.create_task(client_loop(http)) for _ in range(8)]
                await asyncio.sleep(1)
                for target in (v2, v1):
                    await asyncio.to_thread(hub_services.set_alias, user, model, "champion", target)
                    await asyncio.wait_for(wait_for(target), 180)
                stop.set()
                await asyncio.gather(*loops)
            return {"requests": sum(seen.values()), "by_version": seen, "failed": len(failures),
                    "failures": failures[:10], "moves": 2, "clients": 8}  # fmt: skip

        switch = asyncio.run(during_switch())
    finally:
        local.stop_all()
        for process in (server, base_server):
            if process:
                process.terminate()
                process.wait(10)
        shutil.rmtree(data, ignore_errors=True)

    saturated = paths["clients_32"]
    result = {
        "benchmark": "model endpoint: gateway vs direct, cold start, alias switch (local backend, SQLite)",
        "request": "KServe v2 infer, one 8x8 digit, scikit-learn LogisticRegression under MLServer 1.7.1",
        **({"baseline": _describe(args.baseline)} if args.baseline else {}),
        **paths,
        "cold_start": {
            "runs": len(cold_total),
            "first_request_p50_ms": round(percentile(cold_total, 50), 1),
            "start_to_ready_p50_ms": round(percentile(cold_reported, 50), 1),
        },
        "alias_switch": switch,
        "goals": {
            "gateway_adds_p50_ms_below": 2,
            "throughput_loss_pct_below": 5,
            "switch_failed": 0,
        },
        "goals_met": {
            "gateway_adds_p50_ms": all(
                paths[k]["gateway_adds_p50_ms"] < 2 for k in ("clients_1", "clients_32")
            ),
            "throughput_loss_at_32_clients": saturated["gateway_throughput_loss_pct"] < 5,
            "switch_failed": switch["failed"] == 0,
        },
        "load_average_before": load_before,
        "note": "load generator, Gantry (one uvicorn process) and MLServer share this machine's "
        "CPUs: at 32 clients the cores are full, and the gateway's CPU per call "
        "(gantry_cpu_ms_per_request) is taken from what the load generator and MLServer had. "
        "Throughput is judged at 32 clients, where the replica is saturated: one client "
        "waits for each answer before the next call, so its throughput is 1 / latency and "
        "the gateway's added half millisecond on a one-millisecond call shows there as a "
        "third less throughput (clients_1.gateway_throughput_loss_pct). Run it on a quiet "
        "machine (load_average_before): a neighbour's load falls on the gateway's path, "
        "which needs more CPU, more than on the direct one",
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


def _describe(checkout: str) -> str:
    """The baseline checkout's commit, as `git log --oneline` shows it."""
    shown = subprocess.run(
        ["git", "-C", checkout, "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    return shown.stdout.strip()[:120] or checkout


if __name__ == "__main__":
    sys.exit(main())
