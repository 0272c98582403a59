#!/usr/bin/env python
"""The kubelets' and executors' part of bench/k8s_scale.py, in a process of its own:

    python bench/k8s_scale_driver.py <the benchmark's data directory>

It reads `admin.kubeconfig` and `durations.json` there, runs until SIGTERM, then writes
`driver.json` (when each worker's pod was seen Running, and GPUs held by Running pods
sampled every 2 s).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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

    from jobs.compute.kubernetes import manifests as m

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


if __name__ == "__main__":
    sys.exit(run_driver(Path(sys.argv[1])))
