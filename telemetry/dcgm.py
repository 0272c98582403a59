"""GPU telemetry on Kubernetes from NVIDIA's dcgm-exporter (GANTRY_DCGM_EXPORTER_URLS).

The exporter (a DaemonSet on GPU nodes, platform/k8s/dcgm-exporter.yaml) publishes each
GPU's fields in Prometheus' text format, labelled with the pod using the GPU (`namespace`,
`pod`, `container`; `gpu` is the device index on the node, `UUID`, `modelName`,
`Hostname`). Each pass scrapes every exporter (a name resolving to several addresses,
such as the headless Service's, is scraped at each), keeps the samples of pods that are
a running Kubernetes job's current attempt in that job's own namespace, and stores them
as the executor's samples are stored: metric points `gpu<i>/<field>` of the worker
(rank = the Indexed Job's completion index), `gpu0` the pod's lowest device index. Charts,
idle culling and usage reports read them unchanged. Pods Gantry does not know, another
tenant's namespace, an older attempt's pod: ignored."""

from __future__ import annotations

import logging
import re
import socket
from collections import defaultdict
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs import states
from jobs.compute import get_backend
from jobs.models import Job, MetricPoint

logger = logging.getLogger(__name__)

# dcgm-exporter's field -> the executor's metric suffix (executor/gpu.py), same units:
# percent, MiB, watts, degrees C.
FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization",
    "DCGM_FI_DEV_FB_USED": "memory_used_mb",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
}
# A batch Job's pods: `<workload>-<random>`, Indexed: `<workload>-<index>-<random>`; a
# notebook's pod is the workload name itself (jobs.compute.kubernetes.manifests.workload_name).
JOB_POD = re.compile(r"^(gantry-job-(\d+)-a(\d+))(?:-(\d+))?-[a-z0-9]{5}$")
NOTEBOOK_POD = re.compile(r"^(gantry-job-(\d+)-a(\d+))$")
TIMEOUT_SECONDS = 5


def exporter_urls(urls) -> list[str]:
    """Each configured URL, once per address its host name resolves to."""
    found: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 80, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            logger.warning("dcgm-exporter %s: %s", url, exc)
            continue
        for info in infos:
            address = info[4][0]
            host = f"[{address}]" if ":" in address else address
            netloc = f"{host}:{parts.port}" if parts.port else host
            expanded = urlunsplit(parts._replace(netloc=netloc))
            if expanded not in found:
                found.append(expanded)
    return found


def parse(text: str) -> list[dict]:
    """The exposition's samples of FIELDS that name a pod: {namespace, pod, gpu, field, value}."""
    samples = []
    for family in text_string_to_metric_families(text):
        field = FIELDS.get(family.name)
        if field is None:
            continue
        for sample in family.samples:
            labels = sample.labels
            if not labels.get("pod") or not labels.get("namespace"):
                continue  # a GPU no pod holds
            try:
                gpu = int(labels.get("gpu", ""))
            except ValueError:
                continue
            samples.append(
                {
                    "namespace": labels["namespace"],
                    "pod": labels["pod"],
                    "gpu": gpu,
                    "field": field,
                    "value": float(sample.value),
                }
            )
    return samples


def _owner(pod: str):
    """(workload, job id, attempt, rank or None) from a pod name, or None."""
    match = JOB_POD.match(pod) or NOTEBOOK_POD.match(pod)
    if match is None:
        return None
    index = match.group(4) if match.re is JOB_POD else None
    return match.group(1), int(match.group(2)), int(match.group(3)), index


def store(samples: list[dict], now: datetime | None = None) -> int:
    """Store the samples of running Kubernetes jobs' current pods; returns points stored."""
    now = now or timezone.now()
    by_pod: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in samples:
        by_pod[(s["namespace"], s["pod"])].append(s)
    owners = {key: _owner(key[1]) for key in by_pod}
    ids = {owner[1] for owner in owners.values() if owner}
    jobs = {
        job.pk: job
        for job in Job.objects.filter(
            pk__in=ids, backend="kubernetes", state__in=states.LAUNCHED, gpus__gt=0
        ).select_related("project__tenant")
    }
    backend = get_backend("kubernetes") if jobs else None
    points = []
    for (namespace, pod), found in by_pod.items():
        owner = owners[(namespace, pod)]
        job = jobs.get(owner[1]) if owner else None
        if job is None or owner[2] != job.attempt:
            continue
        _, job_namespace, workload = backend.attempt_objects(job)
        rank = int(owner[3] or 0)
        if namespace != job_namespace or owner[0] != workload or rank >= job.workers:
            continue  # a pod named like a Gantry job's in someone else's namespace
        order = {gpu: i for i, gpu in enumerate(sorted({s["gpu"] for s in found}))}
        points += [
            MetricPoint(
                job=job,
                worker=rank,
                name=f"gpu{order[s['gpu']]}/{s['field']}",
                value=s["value"],
                ts=now,
            )
            for s in found
        ]
    MetricPoint.objects.bulk_create(points)
    return len(points)


def scrape(urls=None, now: datetime | None = None) -> int:
    """One pass over the configured exporters; returns points stored (0 when none is)."""
    urls = settings.GANTRY_DCGM_EXPORTER_URLS if urls is None else urls
    if not urls:
        return 0
    samples = []
    for url in exporter_urls(urls):
        try:
            response = httpx.get(url, timeout=TIMEOUT_SECONDS)
            response.raise_for_status()
            samples += parse(response.text)
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning("dcgm-exporter %s: %s", url, exc)
    return store(samples, now)
