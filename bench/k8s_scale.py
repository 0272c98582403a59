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
process; a third process (bench/k8s_scale_driver.py) plays what kwok cannot: the executor in each pod
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
Kueue's CI admission throughput (about 43 admissions/s). Also: where a launch's time goes
(the launching thread per job, the pool's API writes per attempt), the CPU seconds of each
process while the jobs ran (Gantry's, the driver's, each control-plane component's: on a
shared machine the control plane competes with Gantry), and, after the burst, `--quiet-jobs`
single jobs one at a time (what one launch adds when nothing queues) and `--paced-jobs`
arriving `--paced-rate` per second (steady arrivals the cluster keeps up with), with the
same split of submit -> pod Running.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def paced_launches(count: int, rate: float, submit) -> dict[int, float]:
    """After the burst: ``count`` 1-GPU jobs submitted ``rate`` per second (0: one at a
    time, each once it runs), each followed by an admission pass and the launch task as
    a submit is in live Gantry. Returns their submit times; the pods' Running times come
    from the driver, the objects' creation from the launch pool, as for the burst."""
    from django.db import close_old_connections

    from jobs.models import Job
    from jobs.tasks import launch_admitted
    from scheduling.admission import admission_pass

    submitted: dict[int, float] = {}
    began = time.monotonic()
    for i in range(count):
        if rate > 0:
            time.sleep(max(0.0, began + i / rate - time.monotonic()))
        close_old_connections()
        job = submit()
        submitted[job.pk] = time.time()
        admission_pass()
        launch_admitted()
        while rate <= 0 and time.time() - submitted[job.pk] < 30:
            launch_admitted()  # reports what the launch pool finished
            if Job.objects.filter(pk=job.pk, state="running").exists():
                break
            time.sleep(0.02)
    settle = time.monotonic() + 60
    pending = ("queued", "admitted", "starting")
    while (
        time.monotonic() < settle
        and Job.objects.filter(pk__in=submitted, state__in=pending).exists()
    ):
        admission_pass()
        launch_admitted()
        time.sleep(0.05)
    return submitted


def after_the_burst(args, deadline: float, submit) -> dict[str, dict[int, float]]:
    """The phases after the burst, while the deadline allows: one job at a time, then
    paced arrivals. Phase name -> the submit times of its jobs."""
    paced: dict[str, dict[int, float]] = {}
    for phase, count, rate in (
        ("one_at_a_time", args.quiet_jobs, 0.0),
        (f"{args.paced_rate:g}_per_s", args.paced_jobs, args.paced_rate),
    ):
        if time.monotonic() < deadline and count:
            paced[phase] = paced_launches(count, rate, submit)
    return paced


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def audit_verbs(audit: Path) -> Counter:
    """Gantry's ServiceAccount's requests by verb and resource, from the audit log."""
    verbs: Counter = Counter()
    if audit.exists():
        for line in audit.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            resource = (entry.get("objectRef") or {}).get("resource", "")
            verbs[f"{entry.get('verb', '?')} {resource}".strip()] += 1
    return verbs


def main() -> int:
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
    parser.add_argument(
        "--quiet-jobs",
        type=int,
        default=20,
        help="then this many jobs one at a time on the quiet cluster (a lone launch's cost)",
    )
    parser.add_argument(
        "--paced-jobs",
        type=int,
        default=200,
        help="then this many jobs arriving --paced-rate per second (steady arrivals)",
    )
    parser.add_argument("--paced-rate", type=float, default=5.0)
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
    from jobs.compute import get_backend
    from jobs.compute.kubernetes import manifests as m
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

        # Where a launch's time goes: the launching thread (database, manifests, the
        # hand-over to the pool) and each pool create (the API server's answers).
        import jobs.tasks as job_tasks

        split: dict[str, list[float]] = {"launch_job": [], "pool_create": []}
        original_launch_job = job_tasks.launch_job

        def timed_launch_job(job):
            t0 = time.perf_counter()
            try:
                return original_launch_job(job)
            finally:
                split["launch_job"].append(time.perf_counter() - t0)

        job_tasks.launch_job = timed_launch_job
        original_timed_create = backend._create_attempt

        def pool_create(ref, manifests):
            t0 = time.perf_counter()
            try:
                original_timed_create(ref, manifests)
            finally:
                split["pool_create"].append(time.perf_counter() - t0)

        backend._create_attempt = pool_create

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
        # The kubelets' and executors' part, in a process of its own (bench/k8s_scale_driver.py).
        (data / "durations.json").write_text(
            json.dumps({pk: spec["seconds"] for pk, spec in spec_of.items()})
        )
        driver = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "k8s_scale_driver.py"), str(data)],
            cwd=ROOT,
            env={**os.environ},
            stderr=open(data / "driver.log", "ab"),  # noqa: SIM115 (the process keeps it)
        )
        helpers.append(driver)

        capacity = args.nodes * GPUS_PER_NODE
        requests_before, t_requests0 = apiserver_requests(), time.time()
        # Who used the machine's CPU while the jobs ran: Gantry's processes, the
        # simulated kubelets and executors, and each control-plane component.
        pids = {
            "gantry_scheduler_and_launcher": os.getpid(),
            "gantry_k8s_watch": watcher.pid,
            "driver_kubelets_and_executors": driver.pid,
        }
        pids.update((name, proc.pid) for name, proc in cluster.processes.items())
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
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
        cpu_used = {
            name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()
        }
        requests_seconds = time.time() - t_requests0
        paced = after_the_burst(
            args,
            deadline,
            lambda: submit_job(user, projects[mix[0]["tenant"]], command="python q.py", gpus=1),
        )
        for helper in helpers:
            helper.terminate()
        for helper in helpers:
            helper.wait(60)
        driven = json.loads((data / "driver.json").read_text())
        running_at = {(job_id, rank): t for job_id, rank, t in driven["running_at"]}
        samples = driven["gpu_samples"]

        states = Counter(Job.objects.filter(pk__in=submitted_at).values_list("state", flat=True))
        admitted_at = {
            pk: at.timestamp()
            for pk, at in Job.objects.filter(admitted_at__isnull=False).values_list(
                "pk", "admitted_at"
            )
        }
        lat = job_latencies(submitted_at, spec_of, running_at, launched_at, admitted_at, first_pass)
        one_gpu = {"workers": 1}
        after = {
            phase: job_latencies(
                times, dict.fromkeys(times, one_gpu), running_at, launched_at, admitted_at, set()
            )
            for phase, times in paced.items()
        }
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
                "after_the_burst": {
                    phase: {
                        "jobs": len(times),
                        "submit_to_pod_running": summary(after[phase]["to_running"]),
                        "gantry_admitted_to_objects_created": summary(after[phase]["gantry"]),
                        "cluster_objects_created_to_running": summary(after[phase]["cluster"]),
                    }
                    for phase, times in paced.items()
                },
                "launch_concurrency": settings.GANTRY_K8S_LAUNCH_CONCURRENCY,
                "launch_split": {
                    "launching_thread_per_job": summary(split["launch_job"]),
                    "pool_create_per_attempt": summary(split["pool_create"]),
                },
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
                "cpu_seconds_while_running": {
                    **cpu_used,
                    "wall_s": round(requests_seconds, 1),
                    "machine_cpus": os.cpu_count(),
                },
                "gantry_api_requests": {
                    "total": total,
                    "per_s": round(total / max(1.0, elapsed), 1),
                    "per_job": round(total / max(1, args.jobs), 2),
                    "by_verb_and_resource": dict(verbs),
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
