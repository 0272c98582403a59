import json
import subprocess

import pytest

from endpoints import local
from jobs.compute.local import process_start_time

# The Kubernetes control plane of the live tests (tests/k8s_cluster.py, started once per
# worker): the endpoint's objects run on the same one the jobs' do, applied by Gantry as
# the ServiceAccount of platform/k8s/ (`gantry`), read back by the cluster's `admin`.
from tests.jobs.test_k8s_live import (  # noqa: F401
    admin,
    gantry,
    gantry_kubeconfig,
    kube,
    tenant_project,
)


@pytest.fixture
def start_replicas(settings, tmp_path):
    """start(endpoint, n): n of the endpoint's replicas running (as the gateway would have
    started them: a real process, `sleep`, with a replica's pid file; no model server),
    as {replica: process}; all stopped afterwards. Pid files under tmp_path."""
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    processes = []

    def start(endpoint, n, first=0):
        started = {}
        for index in range(first, first + n):
            replica = local.Replica(endpoint.pk, endpoint.model.versions.first().pk, index)
            process = subprocess.Popen(["sleep", "300"])
            processes.append(process)
            replica.run_dir.mkdir(parents=True, exist_ok=True)
            replica.pid_file.write_text(
                json.dumps({"pid": process.pid, "start": process_start_time(process.pid)})
            )
            started[replica] = process
        return started

    yield start
    for process in processes:
        process.kill()
        process.wait()
