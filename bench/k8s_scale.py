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

This process plays Gantry's background worker (admission and launch passes, back to back)
and runs `manage.py k8s_watch`'s two watches in threads; a third thread plays what kwok
cannot: the executor in each pod (its `started` report, given to the services as the
HTTP view would) and the end of its command after the job's duration (the pod annotation
kwok's pod-exit stage acts on).

Measured, per job: submit -> pod Running, split into Gantry's part (submit -> its
Kubernetes objects created, which includes waiting for capacity) and the cluster's own
(objects created -> pod Running: Job controller, scheduler, kwok); admissions per second
of the admission passes; GPUs held by Running pods against capacity, sampled; and the
API server requests made by Gantry's ServiceAccount (from the audit log), per second
and by verb. Anchors: the Kubernetes pod-startup SLO (p99 <= 5 s without image pulls)
and Kueue's CI admission throughput (about 43 admissions/s).
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "philly_vc.csv.gz"
GPUS_PER_NODE = 8


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit-seconds", type=float, default=1800)
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
    from django.contrib.auth import get_user_model
    from django.db import close_old_connections
    from kubernetes import client, watch

    from accounts import services as account_services
    from cluster.models import KubernetesCluster
    from jobs.backends import get_backend
    from jobs.backends import k8s_manifests as m
    from jobs.backends.k8s_watch import watches_for
    from jobs.models import Job
    from jobs.services.ingestion import record_worker_status
    from jobs.services.launch import launch_job
    from jobs.services.submit import submit_job
    from jobs.states import JobState
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
    began = time.monotonic()
    cluster.start()
    result: dict = {"control_plane_up_s": round(cluster.started_seconds, 1)}
    stop = threading.Event()
    threads: list[threading.Thread] = []
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
        ref = backend.default_cluster()

        launched_at: dict[int, float] = {}
        original_launch = backend.launch

        def timed_launch(job, token_for_rank):
            original_launch(job, token_for_rank)
            launched_at[job.pk] = time.time()

        backend.launch = timed_launch

        # Gantry's watches, as manage.py k8s_watch runs them.
        for w in watches_for(backend, ref):
            t = threading.Thread(target=w.run, args=(stop, 1.0), daemon=True)
            t.start()
            threads.append(t)

        # The kubelet-and-executor driver.
        running_at: dict[tuple[int, int], float] = {}
        started: queue.Queue = queue.Queue()
        exits: list = []
        exits_lock = threading.Lock()
        gpus_running: dict[str, int] = {}
        seconds_of: dict[int, float] = {}

        def driver():
            w = watch.Watch()
            while not stop.is_set():
                try:
                    for event in w.stream(
                        core.list_pod_for_all_namespaces,
                        label_selector="app.kubernetes.io/managed-by=gantry",
                        timeout_seconds=5,
                    ):
                        pod = event["object"]
                        labels = pod.metadata.labels or {}
                        key = pod.metadata.namespace + "/" + pod.metadata.name
                        if event["type"] == "DELETED" or pod.status.phase != "Running":
                            gpus_running.pop(key, None)
                            continue
                        job_id = int(labels[m.LABEL_JOB])
                        rank = int(
                            (pod.metadata.annotations or {}).get(
                                m.INDEX_ANNOTATION, labels.get(m.LABEL_RANK, "0")
                            )
                        )
                        limits = pod.spec.containers[0].resources.limits or {}
                        gpus_running[key] = int(limits.get("nvidia.com/gpu", "0"))
                        if (job_id, rank) in running_at:
                            continue
                        running_at[(job_id, rank)] = time.time()
                        started.put((job_id, rank))
                        due = time.time() + seconds_of.get(job_id, 10)
                        with exits_lock:
                            heapq.heappush(exits, (due, pod.metadata.name, pod.metadata.namespace))
                except Exception as exc:  # the stream ended badly: watch again
                    print("driver watch:", exc, file=sys.stderr)
                    time.sleep(1)

        exit_zero = {"metadata": {"annotations": {"stage.gantry.dev/exit-code": "0"}}}

        def finisher():
            while not stop.is_set():
                now = time.time()
                due = []
                with exits_lock:
                    while exits and exits[0][0] <= now:
                        due.append(heapq.heappop(exits))
                for _, name, ns in due:
                    with contextlib.suppress(client.exceptions.ApiException):  # gone already
                        core.patch_namespaced_pod(name, ns, exit_zero)
                time.sleep(0.2)

        for target in (driver, finisher):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            threads.append(t)

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
            seconds_of[job.pk] = j["seconds"]
            spec_of[job.pk] = j
        submit_seconds = time.time() - t_submit0

        capacity = args.nodes * GPUS_PER_NODE
        samples: list[tuple[float, int]] = []
        passes: list[tuple[int, float]] = []
        last_sample = 0.0
        deadline = time.monotonic() + args.limit_seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            admitted = admission_pass()
            passes.append((len(admitted), time.perf_counter() - t0))
            for job in Job.objects.filter(state=JobState.ADMITTED).order_by("admitted_at", "pk"):
                launch_job(job)
            while True:
                try:
                    job_id, rank = started.get_nowait()
                except queue.Empty:
                    break
                job = Job.objects.filter(pk=job_id).first()
                if job is not None and job.state in (JobState.STARTING, JobState.RUNNING):
                    record_worker_status(job, rank, {"event": "started", "pid": 7})
            if time.monotonic() - last_sample > 2:
                samples.append((time.time(), sum(gpus_running.values())))
                last_sample = time.monotonic()
            if not Job.objects.exclude(
                state__in=("succeeded", "failed", "lost", "cancelled", "timed_out")
            ).exists():
                break
            close_old_connections()
            time.sleep(0.05)
        elapsed = time.monotonic() - began
        stop.set()

        states = Counter(Job.objects.values_list("state", flat=True))
        to_running, gantry_part, cluster_part = [], [], []
        for job_id, t_sub in submitted_at.items():
            spec = spec_of[job_id]
            ranks = [running_at.get((job_id, r)) for r in range(spec["workers"])]
            if job_id not in launched_at:
                continue
            gantry_part.append(launched_at[job_id] - t_sub)
            if all(ranks):
                last = max(ranks)
                to_running.append(last - t_sub)
                cluster_part.append(last - launched_at[job_id])
        busy = [(n, s) for n, s in passes if n]
        util = [g / capacity for _, g in samples]
        steady = util[len(util) // 4 : 3 * len(util) // 4] or util
        # The audit log: Gantry's ServiceAccount's requests.
        time.sleep(2)  # batch mode flushes
        verbs: Counter = Counter()
        stamps = []
        if audit.exists():
            for line in audit.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                verbs[entry.get("verb", "?")] += 1
                stamps.append(entry.get("requestReceivedTimestamp", ""))
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
                "submit_to_pod_running": summary(to_running),
                "gantry_submit_to_objects_created": summary(gantry_part),
                "cluster_objects_created_to_running": summary(cluster_part),
                "admission": {
                    "passes": len(passes),
                    "admitted": sum(n for n, _ in passes),
                    "busy_passes": len(busy),
                    "admissions_per_s_in_busy_passes": round(
                        sum(n for n, _ in busy) / max(1e-9, sum(s for _, s in busy)), 1
                    ),
                    "largest_pass": max(busy, default=(0, 0))[0],
                },
                "gpu_allocation": {
                    "samples": len(util),
                    "steady_mean": round(statistics.fmean(steady), 3) if steady else None,
                    "max": round(max(util), 3) if util else None,
                },
                "gantry_api_requests": {
                    "total": total,
                    "per_s": round(total / max(1.0, elapsed), 1),
                    "by_verb": dict(verbs),
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
        stop.set()
        cluster.stop()
        shutil.rmtree(data, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
