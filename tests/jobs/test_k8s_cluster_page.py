"""The cluster page lists this machine and every registered cluster's nodes, who holds
them, and utilization where a metrics source exists (the Kubernetes API server is the
fake of k8s_fake_api.py, Prometheus a stub HTTP server: no real ones exist here)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cluster.models import KubernetesCluster
from cluster.nodes import prometheus_gpu_utilization
from jobs.models import Job

from .test_k8s_backend import kube, launch, node  # noqa: F401


@pytest.fixture
def prometheus():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps(
                {
                    "status": "success",
                    "data": {
                        "resultType": "vector",
                        "result": [{"metric": {"Hostname": "gpu-1"}, "value": [1700000000, "87.5"]}],
                    },
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_query_reads_dcgm_utilization_per_node(prometheus):
    assert prometheus_gpu_utilization(prometheus) == {"gpu-1": 87.5}
    assert prometheus_gpu_utilization("") == {}


def test_cluster_page_lists_nodes_holders_and_utilization(
    kube, owner, project, outsider, client_for, settings, prometheus  # noqa: F811
):
    settings.GANTRY_PROMETHEUS_URL = prometheus
    job = launch(owner, project, gpus=2)
    Job.objects.filter(pk=job.pk).update(placement={**job.placement, "hosts": {"0": "gpu-1"}})
    page = client_for(owner).get("/cluster/").content.decode()
    assert "gpu-1" in page and "NVIDIA-A100-SXM4-80GB" in page
    assert f"#{job.pk}" in page and "Lab A, 2 GPUs" in page
    assert "87.5 %" in page
    assert "no metrics source" in page  # this machine and cpu-1
    # Someone else sees that the GPUs are held, not by which job.
    other = client_for(outsider).get("/cluster/").content.decode()
    assert f"#{job.pk}" not in other and "another tenant (2 GPUs)" in other


def test_a_cluster_that_does_not_answer_is_named_on_the_page(kube, owner, client_for):  # noqa: F811
    KubernetesCluster.objects.create(
        name="broken", kubeconfig=kube.kubeconfig().replace(kube.url, "http://127.0.0.1:9")
    )
    page = client_for(owner).get("/cluster/").content.decode()
    assert "the Kubernetes cluster broken does not answer" in page
    assert "gpu-1" in page  # the other cluster still shows
