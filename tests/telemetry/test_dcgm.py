"""GPU telemetry on Kubernetes from NVIDIA's dcgm-exporter: samples land on the running
job whose current pod holds the GPU, as the executor's samples would, and nowhere else.

The dcgm-exporter needs real GPUs: dcgm/node*.prom, in its exact exposition format,
stands in for it and is served by a real HTTP server on this machine (one per "node");
everything from the HTTP request on (httpx, prometheus_client's parser, attribution,
storage, the minute's task, the usage sums) is the real code."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.models import Job, MetricPoint
from telemetry import dcgm, tasks
from telemetry.models import GpuUsageDay
from telemetry.services import job_utilization

pytestmark = pytest.mark.django_db

HERE = Path(__file__).parent / "dcgm"


@pytest.fixture
def exporters():
    """Start HTTP servers answering /metrics with the given texts; yields a starter."""
    servers = []

    def serve(text: str, status: int = 200) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = text.encode()
                self.send_response(status if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/metrics"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def k8s_job(project, user, kind="train", workers=1, gpus=1, attempt=1, state="running"):
    now = timezone.now()
    return Job.objects.create(
        project=project,
        created_by=user,
        name=f"{kind}-{attempt}",
        kind=kind,
        gpus=gpus,
        workers=workers,
        attempt=attempt,
        backend="kubernetes",
        state=state,
        admitted_at=now - timedelta(minutes=5),
        started_at=now - timedelta(minutes=5),
    )


@pytest.fixture
def recorded(project, owner, other_project, outsider, exporters):
    """Lab A's 2-worker distributed job (2 GPUs each) and lab B's training job (its 2nd
    attempt), with both nodes' expositions served."""
    a = k8s_job(project, owner, kind="distributed", workers=2, gpus=2)
    b = k8s_job(other_project, outsider, attempt=2)

    def text(name):
        raw = (HERE / f"{name}.prom").read_text()
        return raw.replace("JOB_A", str(a.pk)).replace("JOB_B", str(b.pk))

    return a, b, [exporters(text("node1")), exporters(text("node2"))]


def values(job, worker=None):
    points = MetricPoint.objects.filter(job=job)
    if worker is not None:
        points = points.filter(worker=worker)
    return dict(points.values_list("name", "value"))


def test_samples_land_on_the_job_whose_pod_holds_the_gpu(recorded):
    a, b, urls = recorded
    assert dcgm.scrape(urls) == 20  # 4 GPUs of A and 1 of B, 4 fields each
    assert values(a, 0) == {
        "gpu0/utilization": 87.0,
        "gpu0/memory_used_mb": 30215.0,
        "gpu0/power_w": 312.625,
        "gpu0/temperature_c": 61.0,
        "gpu1/utilization": 91.0,
        "gpu1/memory_used_mb": 30877.0,
        "gpu1/power_w": 325.5,
        "gpu1/temperature_c": 63.0,
    }
    # Worker 1's pod holds devices 4 and 6 of its node: its cuda:0 and cuda:1.
    assert values(a, 1)["gpu0/utilization"] == 12.0
    assert values(a, 1)["gpu1/utilization"] == 0.0
    # B's current attempt only, in B's namespace: not the pod named like it in lab A's
    # namespace (99%), not its first attempt's pod (77%).
    assert values(b) == {
        "gpu0/utilization": 55.0,
        "gpu0/memory_used_mb": 12000.0,
        "gpu0/power_w": 200.25,
        "gpu0/temperature_c": 58.0,
    }
    # Pods Gantry does not know (a jupyter namespace, a job id that does not exist),
    # GPUs no pod holds: nothing stored anywhere else.
    assert MetricPoint.objects.exclude(job__in=[a, b]).count() == 0
    assert job_utilization([a.pk, b.pk])[a.pk]["current"] == pytest.approx((87 + 91 + 12) / 4)


def test_finished_and_local_jobs_get_nothing(recorded):
    a, b, urls = recorded
    Job.objects.filter(pk=a.pk).update(state="succeeded")
    Job.objects.filter(pk=b.pk).update(backend="local")
    assert dcgm.scrape(urls) == 0
    assert not MetricPoint.objects.exists()


def test_the_minute_task_scrapes_the_configured_exporters(recorded, exporters, settings):
    a, b, urls = recorded
    # One exporter answering an error and one not answering at all do not stop the rest.
    settings.GANTRY_DCGM_EXPORTER_URLS = [
        *urls,
        exporters("oops", status=500),
        "http://127.0.0.1:9/metrics",
    ]
    outcome = tasks.tick()
    assert outcome["dcgm_points"] == 20
    day = GpuUsageDay.objects.get(job=a)
    assert (day.samples, day.utilization_sum, day.memory_max_mb) == (4, 87 + 91 + 12, 30877)
    assert GpuUsageDay.objects.get(job=b).utilization_sum == 55


def test_nothing_configured_nothing_scraped(recorded, settings):
    settings.GANTRY_DCGM_EXPORTER_URLS = []
    assert tasks.tick()["dcgm_points"] == 0


@pytest.mark.parametrize(
    "urls,expected", [("http://gantry-dcgm-exporter.gantry.svc:9400/metrics", "0.0"), ("", "2.0")]
)
def test_pods_leave_sampling_to_the_exporter(urls, expected):
    """The settings as a fresh process reads them from its environment."""
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "GANTRY_GPU_SAMPLE_SECONDS": "2",
        "GANTRY_DCGM_EXPORTER_URLS": urls,
    }
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "from jobs.compute.kubernetes.backend import manifest_config; "
        "from jobs.compute.kubernetes.client import ClusterRef; "
        "print(manifest_config(ClusterRef('default')).gpu_sample_seconds)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=environ,
        cwd=HERE.parents[2],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == expected


def test_the_exposition_is_read_by_name_and_label():
    text = (HERE / "node1.prom").read_text()
    samples = dcgm.parse(text)
    assert {s["field"] for s in samples} == set(dcgm.FIELDS.values())  # SM clock left out
    assert all(s["pod"] and s["namespace"] for s in samples)  # GPU 3 has no pod
    assert len(samples) == 3 * 4
