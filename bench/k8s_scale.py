#!/usr/bin/env python
"""Gantry on a simulated GPU cluster: kwok nodes, a real control plane, many jobs.

    python bench/k8s_scale.py [--nodes 100] [--jobs 1000] [--out bench/results/k8s_scale.json]
    python bench/k8s_scale.py --nodes 1000 --jobs 10000     # the issue's full size

Setup: the control plane of the live tests (tests/k8s_cluster.py: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok; binaries from platform/dev/k8s-build) with
`--nodes` fake nodes of 8 GPUs, the API server writing an audit log of the requests made
by Gantry's ServiceAccount; Gantry in this process on a fresh SQLite database, talking to
the cluster as that ServiceAccount.

The jobs: a sample of the Philly trace (../shared/traces/philly_vc.csv.gz): its GPU
counts (jobs of more than 8 GPUs become gang jobs of 8-GPU workers, at most 8 workers),
its tenants, its durations divided by 1,000 and kept within 5-60 s. All are submitted at
once through `jobs.services.submit_job` (the API's code path, without HTTP).

This process plays Gantry's background worker: admission passes and the launch task
(`jobs.tasks.launch_admitted`, whose Kubernetes creates run in the backend's launch pool),
back to back. Gantry's watcher runs as deployed, `manage.py k8s_watch` in its own
process; a third process (`--driver`) plays what kwok cannot: the executor in each pod
(its `started` report, given to the services as the HTTP view would) and the end of its
command after the job's duration (the pod annotation kwok's pod-exit stage acts on).
The controller-manager's and scheduler's client rate limits are off (as kwokctl's
`--disable-qps-limits`; `--client-qps-limits default` keeps 20/s and 50/s).

Measured, per job: submit -> pod Running, split into waiting in the queue (submit ->
admitted: capacity), Gantry's launch (admitted -> its Kubernetes objects created; for the
first pass's burst and for later passes) and the cluster's own part (objects created ->
pod Running: Job controller, scheduler, kwok); admissions per second of the admission
passes and launches per second of the launch task; GPUs held by Running pods against
capacity, sampled; the API server requests made by Gantry's ServiceAccount (from the
audit log), per second and by verb, beside all requests the API server served (its
/metrics). Anchors: the Kubernetes pod-startup SLO (p99 <= 5 s without image pulls) and
Kueue's CI admission throughput (about 43 admissions/s).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import heapq
import json
import math
import os
import platform
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from measure import percentile

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "philly_vc.csv.gz"
GPUS_PER_NODE = 8


def summary(values: list[float]) -> dict:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_s": round(percentile(values, 50), 3),
        "p99_s": round(percentile(values, 99), 3),
        "mean_s": round(statistics.fmean(values), 3),
        "max_s": round(max(values), 3),
    }


def workload(n: int, seed: int, trace: Path) -> list[dict]:
    rows = []
    if trace.exists():
        with gzip.open(trace, "rt") as f:
            rows = [r for r in csv.DictReader(f) if int(r["num_gpus"]) > 0]
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        if rows:
            row = rng.choice(rows)
            gpus, tenant, duration = int(row["num_gpus"]), row["tenant"], float(row["duration"])
        else:  # no trace here: the trace's shape, roughly
            gpus = rng.choice([1] * 93 + [2, 2, 4, 4, 8, 8, 16])
            tenant, duration = f"t{rng.randrange(15)}", rng.uniform(5_000, 60_000)
        seconds = min(60.0, max(5.0, duration / 1000))
        if gpus > GPUS_PER_NODE:
            workers = min(8, math.ceil(gpus / GPUS_PER_NODE))
            spec = {"kind": "distributed", "workers": workers, "gpus": GPUS_PER_NODE}
        else:
            spec = {"kind": "train", "workers": 1, "gpus": gpus}
        jobs.append({**spec, "tenant": "p" + tenant[:10].lower(), "seconds": seconds, "i": i})
    return jobs


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
    users: ["system:serviceaccount:gantry:gantry"]
  - level: None
"""


def report_started(started: queue.Queue, stop: threading.Event) -> None:
    """The executors' `started` reports, as the HTTP view would make them, for each
    (job, rank) the driver's watch saw Running, until the driver is stopped."""
    from jobs.models import Job
    from jobs.services.ingestion import record_worker_status

    while not stop.is_set():
        try:
            job_id, rank = started.get(timeout=0.2)
        except queue.Empty:
            continue
        job = Job.objects.filter(pk=job_id).first()
        if job is not None and job.state in ("starting", "running"):
            try:
                record_worker_status(job, rank, {"event": "started", "pid": 7})
            except Exception as exc:
                print("driver report:", exc, file=sys.stderr)


def job_latencies(
    submitted_at: dict,
    spec_of: dict,
    running_at: dict,
    launched_at: dict,
    admitted_at: dict,
    first_pass: set,
) -> dict[str, list[float]]:
    """Per job, the stretches from submit to its last pod Running: queued (submit to
    admitted), Gantry's part (admitted to objects created; in the first pass's burst or
    later) and the cluster's (objects created to the last rank Running)."""
    out: dict[str, list[float]] = {
        k: [] for k in ("to_running", "queued", "gantry", "cluster", "burst", "later")
    }
    for job_id, t_sub in submitted_at.items():
        if job_id not in launched_at or job_id not in admitted_at:
            continue
        ranks = [running_at.get((job_id, r)) for r in range(spec_of[job_id]["workers"])]
        t_adm, t_created = admitted_at[job_id], launched_at[job_id]
        out["queued"].append(t_adm - t_sub)
        out["gantry"].append(t_created - t_adm)
        out["burst" if job_id in first_pass else "later"].append(t_created - t_adm)
        if all(ranks):
            last = max(ranks)
            out["to_running"].append(last - t_sub)
            out["cluster"].append(last - t_created)
    return out


def audit_verbs(audit: Path) -> Counter:
    """Gantry's ServiceAccount's requests by verb, from the API server's audit log."""
    verbs: Counter = Counter()
    if audit.exists():
        for line in audit.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            verbs[entry.get("verb", "?")] += 1
    return verbs


def run_driver(data: Path) -> int:
    """The kubelets' and executors' part, in its own process: for every pod that kwok
    makes Running, the executor's `started` report (to the services, as the HTTP view
    would) and, after the job's duration, the end of its command (the pod annotation
    kwok's pod-exit stage acts on); GPUs held by Running pods, sampled every 2 s. Pods
    are read as raw JSON from one watch (the client's model objects cost more CPU than
    the rest of the driver)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from kubernetes import client, config

    from jobs.backends import k8s_manifests as m

    cfg = client.Configuration()
    config.load_kube_config(str(data / "admin.kubeconfig"), client_configuration=cfg)
    core = client.CoreV1Api(client.ApiClient(cfg))
    seconds_of = {int(k): v for k, v in json.loads((data / "durations.json").read_text()).items()}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    running_at: dict[tuple[int, int], float] = {}
    started: queue.Queue = queue.Queue()
    exits: list = []
    lock = threading.Lock()
    gpus_running: dict[str, int] = {}
    samples: list[tuple[float, int]] = []
    selector = ",".join(f"{k}={v}" for k, v in m.MANAGED_BY.items())

    def on_pod(kind: str, pod: dict) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        key = meta["namespace"] + "/" + meta["name"]
        if kind == "DELETED" or status.get("phase") != "Running":
            gpus_running.pop(key, None)
            return
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        job_id = int(labels[m.LABEL_JOB])
        rank = int(annotations.get(m.INDEX_ANNOTATION, labels.get(m.LABEL_RANK, "0")))
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits") or {}
        gpus_running[key] = int(limits.get("nvidia.com/gpu", "0"))
        if (job_id, rank) in running_at:
            return
        running_at[(job_id, rank)] = time.time()
        started.put((job_id, rank))
        with lock:
            heapq.heappush(
                exits, (time.time() + seconds_of.get(job_id, 10), meta["name"], meta["namespace"])
            )

    def watcher():
        version = None
        while not stop.is_set():
            try:
                if version is None:
                    listing = json.loads(
                        core.list_pod_for_all_namespaces(
                            label_selector=selector, _preload_content=False
                        ).data
                    )
                    for pod in listing["items"]:
                        on_pod("SYNC", pod)
                    version = listing["metadata"]["resourceVersion"]
                response = core.list_pod_for_all_namespaces(
                    label_selector=selector,
                    watch=True,
                    resource_version=version,
                    timeout_seconds=30,
                    _preload_content=False,
                )
                for line in response:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = None  # 410 Gone: list again
                        break
                    on_pod(event["type"], event["object"])
                    version = event["object"]["metadata"]["resourceVersion"]
            except Exception as exc:  # the stream ended badly: watch again
                print("driver watch:", exc, file=sys.stderr)
                time.sleep(1)

    exit_zero = {"metadata": {"annotations": {"stage.gantry.dev/exit-code": "0"}}}

    def finisher():
        last_sample = 0.0
        while not stop.is_set():
            now = time.time()
            due = []
            with lock:
                while exits and exits[0][0] <= now:
                    due.append(heapq.heappop(exits))
            for _, name, ns in due:
                with contextlib.suppress(client.exceptions.ApiException):  # gone already
                    core.patch_namespaced_pod(name, ns, exit_zero, _preload_content=False)
            if now - last_sample >= 2:
                samples.append((now, sum(gpus_running.values())))
                last_sample = now
            time.sleep(0.1)

    for target in (watcher, finisher):
        threading.Thread(target=target, daemon=True).start()
    report_started(started, stop)
    (data / "driver.json").write_text(
        json.dumps(
            {
                "running_at": [[j, r, t] for (j, r), t in running_at.items()],
                "gpu_samples": samples,
            }
        )
    )
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--driver":
        return run_driver(Path(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit-seconds", type=float, default=1800)
    parser.add_argument(
        "--client-qps-limits",
        choices=("off", "default"),
        default="off",
        help="the controller-manager's and scheduler's client rate limits: off as kwokctl's "
        "--disable-qps-limits (5,000/s), or their defaults (20/s and 50/s)",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "k8s_scale.json"))
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="gantry-k8s-bench-"))
    env = {
        "GANTRY_DATA_DIR": str(data),
        "GANTRY_ENV": "development",
        "DEBUG": "false",
        "LOG_LEVEL": "ERROR",
        "GANTRY_JOB_BACKEND": "kubernetes",
        "GANTRY_URL": "http://127.0.0.1:9",  # executors are played in-process
        "REDIS_URL": "",
    }
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env={**os.environ},
        check=True,
    )
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import yaml
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import close_old_connections
    from kubernetes import client

    from accounts import services as account_services
    from cluster.models import KubernetesCluster
    from jobs.backends import get_backend
    from jobs.backends import k8s_manifests as m
    from jobs.models import Job
    from jobs.services.submit import submit_job
    from jobs.tasks import launch_admitted
    from projects import services as project_services
    from scheduling.admission import admission_pass
    from tests.jobs.test_k8s_live import platform_documents, server_side_apply
    from tests.k8s_cluster import KubeCluster

    nodes = tuple(
        (f"gpu-{i:04d}", GPUS_PER_NODE, "NVIDIA-A100-SXM4-80GB") for i in range(args.nodes)
    )
    cluster = KubeCluster(nodes=nodes)
    policy = cluster.dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit = cluster.dir / "audit.log"
    cluster.extra_apiserver_args = [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={audit}",
        "--audit-log-format=json",
        "--audit-log-mode=batch",
    ]
    if args.client_qps_limits == "off":
        unlimited = ["--kube-api-qps=5000", "--kube-api-burst=10000"]
        cluster.extra_controller_manager_args = [*unlimited, "--concurrent-job-syncs=50"]
        cluster.extra_scheduler_args = list(unlimited)
    began = time.monotonic()
    cluster.start()
    result: dict = {"control_plane_up_s": round(cluster.started_seconds, 1)}
    helpers: list[subprocess.Popen] = []  # Gantry's watcher and the driver
    try:
        admin_api = cluster.client()
        core = client.CoreV1Api(admin_api)
        server_side_apply(admin_api, platform_documents())
        token = core.create_namespaced_service_account_token(
            "gantry", "gantry", {"spec": {"expirationSeconds": 86400}}
        ).status.token
        kubeconfig = yaml.safe_dump(
            cluster.kubeconfig_dict(token, user="system:serviceaccount:gantry:gantry")
        )
        KubernetesCluster.objects.create(name="kwok", kubeconfig=kubeconfig, is_default=True)
        backend = get_backend("kubernetes")

        # When each attempt's objects exist: the launch pool's creates, timed where they run.
        launched_at: dict[int, float] = {}
        original_create = backend._create_attempt

        def timed_create(ref, manifests):
            original_create(ref, manifests)
            launched_at[int(manifests[-1]["metadata"]["labels"][m.LABEL_JOB])] = time.time()

        backend._create_attempt = timed_create

        def apiserver_requests() -> float:
            """All requests the API server has served (its /metrics), from every client."""
            total = 0.0
            for line in cluster._get(cluster.server + "/metrics").splitlines():
                if line.startswith("apiserver_request_total{"):
                    total += float(line.rsplit(" ", 1)[1])
            return total

        # Gantry's watches: `manage.py k8s_watch` in its own process, as deployed.
        watcher = subprocess.Popen(
            [sys.executable, "manage.py", "k8s_watch"],
            cwd=ROOT,
            env={**os.environ},
            stdout=subprocess.DEVNULL,
            stderr=open(data / "k8s_watch.log", "ab"),  # noqa: SIM115 (the process keeps it)
        )
        helpers.append(watcher)
        admin_kubeconfig = data / "admin.kubeconfig"
        admin_kubeconfig.write_text(yaml.safe_dump(cluster.kubeconfig_dict()))

        # Tenants and jobs, all submitted at once.
        user = get_user_model().objects.create_user("bench", password="bench-password-1")
        mix = workload(args.jobs, args.seed, TRACE)
        projects = {}
        for slug in sorted({j["tenant"] for j in mix}):
            tenant = account_services.create_tenant(actor=user, name=slug, slug=slug)
            projects[slug] = project_services.create_project(
                actor=user, tenant=tenant, name=slug, slug="p"
            )
        submitted_at: dict[int, float] = {}
        spec_of: dict[int, dict] = {}
        t_submit0 = time.time()
        for j in mix:
            job = submit_job(
                user,
                projects[j["tenant"]],
                command="python train.py",
                kind=j["kind"],
                workers=j["workers"],
                gpus=j["gpus"],
                cpus=1,
                memory_mb=1024,
            )
            submitted_at[job.pk] = time.time()
            spec_of[job.pk] = j
        submit_seconds = time.time() - t_submit0
        # The kubelets' and executors' part, in a process of its own (see `driver`).
        (data / "durations.json").write_text(
            json.dumps({pk: spec["seconds"] for pk, spec in spec_of.items()})
        )
        driver = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--driver", str(data)],
            cwd=ROOT,
            env={**os.environ},
            stderr=open(data / "driver.log", "ab"),  # noqa: SIM115 (the process keeps it)
        )
        helpers.append(driver)

        capacity = args.nodes * GPUS_PER_NODE
        requests_before, t_requests0 = apiserver_requests(), time.time()
        passes: list[tuple[int, float]] = []
        launch_runs: list[tuple[int, float]] = []
        first_pass: set[int] = set()  # the burst: what the first pass admitted at once
        last_progress = time.monotonic()
        deadline = time.monotonic() + args.limit_seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            admitted = admission_pass()
            passes.append((len(admitted), time.perf_counter() - t0))
            if admitted and not first_pass:
                first_pass.update(getattr(j, "pk", j) for j in admitted)
            t0 = time.perf_counter()
            launched = launch_admitted()  # as scheduling.tasks.admit_and_launch does
            if launched:
                launch_runs.append((launched, time.perf_counter() - t0))
            if time.monotonic() - last_progress > 15:
                last_progress = time.monotonic()
                counts = Counter(Job.objects.values_list("state", flat=True))
                print(f"{time.monotonic() - began:.0f} s: {dict(counts)}", file=sys.stderr)
            if not Job.objects.exclude(
                state__in=("succeeded", "failed", "lost", "cancelled", "timed_out")
            ).exists():
                break
            close_old_connections()
            time.sleep(0.05)
        elapsed = time.monotonic() - began
        all_requests = apiserver_requests() - requests_before
        requests_seconds = time.time() - t_requests0
        for helper in helpers:
            helper.terminate()
        for helper in helpers:
            helper.wait(60)
        driven = json.loads((data / "driver.json").read_text())
        running_at = {(job_id, rank): t for job_id, rank, t in driven["running_at"]}
        samples = driven["gpu_samples"]

        states = Counter(Job.objects.values_list("state", flat=True))
        admitted_at = {
            pk: at.timestamp()
            for pk, at in Job.objects.filter(admitted_at__isnull=False).values_list(
                "pk", "admitted_at"
            )
        }
        lat = job_latencies(submitted_at, spec_of, running_at, launched_at, admitted_at, first_pass)
        busy = [(n, s) for n, s in passes if n]
        util = [g / capacity for _, g in samples]
        steady = util[len(util) // 4 : 3 * len(util) // 4] or util
        # The audit log: Gantry's ServiceAccount's requests.
        time.sleep(2)  # batch mode flushes
        verbs = audit_verbs(audit)
        total = sum(verbs.values())
        result.update(
            {
                "benchmark": "Gantry on a kwok GPU cluster: submit to pod Running at scale",
                "nodes": args.nodes,
                "gpus": capacity,
                "jobs": args.jobs,
                "job_mix": dict(
                    Counter(f"{j['kind']}-{j['workers']}x{j['gpus']}gpu" for j in mix).most_common(
                        12
                    )
                ),
                "submit_all_s": round(submit_seconds, 1),
                "run_s": round(elapsed, 1),
                "final_states": dict(states),
                "submit_to_pod_running": summary(lat["to_running"]),
                "queued_submit_to_admitted": summary(lat["queued"]),
                "gantry_admitted_to_objects_created": summary(lat["gantry"]),
                "gantry_admitted_to_objects_created_first_pass": summary(lat["burst"]),
                "gantry_admitted_to_objects_created_later_passes": summary(lat["later"]),
                "cluster_objects_created_to_running": summary(lat["cluster"]),
                "launch_concurrency": settings.GANTRY_K8S_LAUNCH_CONCURRENCY,
                "client_qps_limits": args.client_qps_limits,
                "launch": {
                    "launched": sum(n for n, _ in launch_runs),
                    "launches_per_s_in_launch_runs": round(
                        sum(n for n, _ in launch_runs) / max(1e-9, sum(t for _, t in launch_runs)),
                        1,
                    ),
                    "largest_run": max(launch_runs, default=(0, 0))[0],
                },
                "admission": {
                    "passes": len(passes),
                    "admitted": sum(n for n, _ in passes),
                    "busy_passes": len(busy),
                    "admissions_per_s_in_busy_passes": round(
                        sum(n for n, _ in busy) / max(1e-9, sum(s for _, s in busy)), 1
                    ),
                    "largest_pass": max(busy, default=(0, 0))[0],
                    "first_busy_pass": {
                        "admitted": busy[0][0] if busy else 0,
                        "seconds": round(busy[0][1], 2) if busy else None,
                        "admissions_per_s": round(busy[0][0] / busy[0][1], 1) if busy else None,
                    },
                },
                "gpu_allocation": {
                    "samples": len(util),
                    "steady_mean": round(statistics.fmean(steady), 3) if steady else None,
                    "max": round(max(util), 3) if util else None,
                },
                "gantry_api_requests": {
                    "total": total,
                    "per_s": round(total / max(1.0, elapsed), 1),
                    "per_job": round(total / max(1, args.jobs), 2),
                    "by_verb": dict(verbs),
                },
                "apiserver_requests_all_clients": {
                    "total": int(all_requests),
                    "per_s": round(all_requests / max(1.0, requests_seconds), 1),
                    "gantry_share": round(total / max(1.0, all_requests), 3),
                },
                "anchors": {
                    "k8s_pod_startup_slo_p99_s": 5,
                    "kueue_ci_admissions_per_s": 43,
                    "goal_gantry_p99_added_s": 1,
                    "goal_admissions_per_s": 100,
                },
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                },
            }
        )
    finally:
        for helper in helpers:
            if helper.poll() is None:
                helper.kill()
        cluster.stop()
        shutil.rmtree(data, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
