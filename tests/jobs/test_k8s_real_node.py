"""Gantry's jobs in real containers: the control plane of tests/k8s_cluster.py with its kwok
GPU nodes, and beside them one real worker node (tests/k8s_node.py: containerd, runc and
kubelet). The job's pod is pulled from the test registry (tests/registry.py; the image
platform/dev/images-build makes: Python, the executor, scikit-learn), and the executor in it
does what it does in production: fetches its spec from Gantry's API, streams its log,
uploads its outputs and reports its exit.

The network rule (tests/k8s_node.py says how the node keeps it): the node (containerd,
kubelet, CoreDNS) and its pod network live in a network namespace the node makes for itself;
pods have addresses there, find each other by the cluster's DNS names, and reach Gantry's
live server through a relay at the bridge's address to its 127.0.0.1 port
(`KubeNode.expose`). The registry, the API server and kubelet listen on 127.0.0.1. Nothing
else is contacted.

The kwok GPU nodes carry the `nvidia.com/gpu` NoSchedule taint that real GPU nodes usually
carry, so CPU jobs go to the real node. Without the binaries, the image or the registry's
tools these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.ports import free_port
from tests.datasets.conftest import ceph, s3_storage  # noqa: F401 - this worker's Ceph
from tests.jobs.test_k8s_live import Admin, Gantry, platform_documents, server_side_apply
from tests.k8s_cluster import SERVICE_SUBNET, ClusterUnavailable, KubeCluster
from tests.k8s_node import GATEWAY, NODE_NAME, POD_SUBNET, KubeNode
from tests.registry import PASSWORD, USERNAME, missing_tools, start_registry

# One xdist worker takes the whole module (--dist loadgroup): one control plane and node.
pytestmark = [pytest.mark.k8s_live, pytest.mark.slow, pytest.mark.xdist_group("k8s-real-node")]

IMAGES_BUILD = Path(__file__).resolve().parents[2] / "platform" / "dev" / "images-build"
WAIT = 150  # a safety net against hanging (the first pull unpacks the image), not a timing

TRAIN = """\
import json, os, pickle
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
x, y = load_digits(return_X_y=True)
print("training on", len(x[:1200]), "digits", flush=True)
model = LogisticRegression(max_iter=300).fit(x[:1200], y[:1200])
accuracy = model.score(x[1200:], y[1200:])
print("accuracy", round(accuracy, 3), flush=True)
out = os.environ["GANTRY_OUTPUTS_DIR"]
with open(os.path.join(out, "model.pkl"), "wb") as f:
    pickle.dump(model, f)
probe = {"uid": os.getuid(), "gid": os.getgid()}
try:
    open("/probe", "w")
    probe["root_fs"] = "writable"
except OSError as exc:
    probe["root_fs"] = exc.strerror
status = open("/proc/self/status").read().splitlines()
probe.update(l.split(":\\t") for l in status if l.startswith(("CapEff", "Seccomp", "NoNewPrivs")))
probe["token"] = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount")
with open(os.path.join(out, "probe.json"), "w") as f:
    json.dump(probe, f)
"""


def settings_bucket() -> str:
    from django.conf import settings

    return settings.STORAGES["default"]["OPTIONS"]["bucket_name"]


def unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real Kubernetes node cannot run (CI=true): {reason}")
    pytest.skip(reason)


def python_image() -> tuple[str, list[str]]:
    """The Python image's reference in buildah's storage and buildah's flags."""
    tools = [t for t in ("buildah", *missing_tools()) if not shutil.which(t)]
    if tools:
        unavailable(f"no {', '.join(tools)}")
    env = dict(
        line.split("=", 1)
        for line in subprocess.run(
            [str(IMAGES_BUILD), "--env"], check=True, capture_output=True, text=True
        ).stdout.splitlines()
    )
    flags = shlex.split(env["BUILDAH_FLAGS"])
    image = env["GANTRY_PYTHON_IMAGE"]
    found = subprocess.run(
        ["buildah", *flags, "inspect", "--type", "image", image], capture_output=True
    )
    if found.returncode != 0:
        unavailable(f"{image} is not built: run platform/dev/images-build")
    return image, flags


@pytest.fixture(scope="module")
def real_node(tmp_path_factory):
    """The control plane, kwok's GPU nodes tainted as GPU nodes are, the test registry
    holding the Python image, and the real node; all stopped afterwards."""
    image, flags = python_image()
    registry = start_registry(tmp_path_factory.mktemp("registry"))
    cluster = node = None
    try:
        pushed = f"{registry.host}/gantry/python:{image.rsplit(':', 1)[1]}"
        begun = time.monotonic()
        subprocess.run(
            ["buildah", *flags, "push", "--quiet", "--tls-verify=false", "--creds",
             f"{USERNAME}:{PASSWORD}", image, f"docker://{pushed}"],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        pushed_seconds = time.monotonic() - begun
        try:
            cluster = KubeCluster().start()
            from kubernetes import client

            core = client.CoreV1Api(cluster.client())
            taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
            for node_ in core.list_node().items:
                core.patch_node(node_.metadata.name, {"spec": {"taints": [taint]}})
            node = KubeNode(cluster, registry_hosts=(registry.host,)).start()
        except ClusterUnavailable as exc:
            unavailable(str(exc))
        print(
            f"image pushed in {pushed_seconds:.1f} s, control plane up in "
            f"{cluster.started_seconds:.1f} s, node Ready in {node.started_seconds:.1f} s"
        )
        yield cluster, node, registry, pushed
    finally:
        if node is not None:
            node.stop()
            assert not any(node.leftovers().values()), node.leftovers()
        if cluster is not None:
            cluster.stop()
        registry.stop()


@pytest.fixture
def gantry(transactional_db, settings, real_node, live_server, tmp_path):
    """Gantry on the cluster as its ServiceAccount (platform/k8s/), its pods on the node's
    pod network reaching the live server through the node's relay, and the registry's pull
    Secret named for every pod."""
    import yaml
    from kubernetes import client

    from cluster.models import KubernetesCluster
    from jobs.compute import reset_backends

    cluster, node, registry, pushed = real_node
    # Gantry's own servers run in this test process: their Deployments and DaemonSet would
    # only take the real node's CPUs and ask it for images it must not fetch.
    server_side_apply(
        cluster.client(),
        [d for d in platform_documents() if d["kind"] not in ("Deployment", "DaemonSet")],
    )
    token = (
        client.CoreV1Api(cluster.client())
        .create_namespaced_service_account_token(
            "gantry", "gantry", {"spec": {"expirationSeconds": 86400}}
        )
        .status.token
    )
    kubeconfig = yaml.safe_dump(
        cluster.kubeconfig_dict(token, user="system:serviceaccount:gantry:gantry")
    )
    settings.GANTRY_JOB_BACKEND = "kubernetes"
    settings.GANTRY_URL = live_server.url
    settings.GANTRY_K8S_API_URL = node.expose(live_server.url)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, GATEWAY]  # the pods' name for it
    settings.GANTRY_K8S_DEFAULT_IMAGE = pushed
    settings.GANTRY_K8S_HOST_NETWORK = False  # Pod Security "restricted", as in production
    settings.GANTRY_K8S_IMAGE_PULL_SECRETS = ["gantry-registry"]
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    settings.GANTRY_JOB_GRACE_SECONDS = 2
    # The node shares the machine's 2 cores with the rest of the suite: in CI an executor's
    # first heartbeat came 48 s after its launch (the container started late), past the
    # 30 s default, and the attempt was lost. Losing a silent executor is tested on its own
    # (tests/jobs); here evictions are found from the pods, not from silence.
    settings.GANTRY_HEARTBEAT_TIMEOUT_SECONDS = 120
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "files"},
        },
    }
    KubernetesCluster.objects.create(name="real", kubeconfig=kubeconfig, is_default=True)
    reset_backends()
    yield Gantry(Admin(cluster), live_server.url)
    reset_backends()


def pull_secret(registry) -> dict:
    import base64
    import json

    auth = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    config = {"auths": {registry.host: {"auth": auth}}}
    return {
        "metadata": {"name": "gantry-registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def real_tenant(gantry, owner, registry, slug: str):
    """A tenant's project and namespace (made by Gantry), with the registry's pull Secret
    put there (the lab admin's part)."""

    from accounts import services as account_services
    from projects import services as project_services

    tenant = account_services.create_tenant(actor=owner, name=slug, slug=slug)
    project = project_services.create_project(actor=owner, tenant=tenant, name="P", slug="p")
    ns = gantry.backend.ensure_tenant(gantry.backend.connection(gantry.ref), tenant)
    gantry.admin.core.create_namespaced_secret(ns, pull_secret(registry))
    return project, ns


def diagnosis(real_node, job, ns: str) -> str:
    """What the pod, its events, kubelet and Gantry say (for a failure's message)."""
    from kubernetes import client

    from jobs.models import LogChunk

    cluster, node, _, _ = real_node
    core = client.CoreV1Api(cluster.client())
    job.refresh_from_db()
    pods = core.list_namespaced_pod(ns).items
    events = [f"{e.reason}: {e.message}" for e in core.list_namespaced_event(ns).items]
    lines = [line["text"] for c in LogChunk.objects.filter(job=job) for line in c.lines()]
    timeline = [f"{e.at:%H:%M:%S.%f} {e.to_state}: {e.reason}" for e in job.events.order_by("at")]
    arrived = [f"{c.created_at:%H:%M:%S.%f} seq {c.first_seq}-{c.last_seq}"
               for c in LogChunk.objects.filter(job=job).order_by("pk")]  # fmt: skip
    executors = []  # what the executors wrote to stderr: retries, the server unreachable
    for p in pods:
        try:
            said = core.read_namespaced_pod_log(p.metadata.name, ns, tail_lines=20)
        except client.ApiException as exc:
            said = f"(no log: {exc.reason})"
        executors += [f"--- executor in {p.metadata.name}", said]
    return "\n".join(
        [
            f"job {job.state}: {job.state_reason}",
            *(f"pod {p.metadata.name} {p.status.phase} {p.status.container_statuses}" for p in pods),
            *events,
            "--- job timeline", *timeline,
            "--- log chunks received", *arrived,
            "--- job log", *lines[-30:],
            *executors,
            "--- kubelet", node.log_tail("kubelet", 20),
            "--- containerd", node.log_tail("containerd", 10),
        ]
    )  # fmt: skip


def test_the_real_node_is_ready_beside_the_kwok_nodes_on_loopback(real_node):
    from kubernetes import client

    cluster, node, _, _ = real_node
    core = client.CoreV1Api(cluster.client())
    real = core.read_node(NODE_NAME)
    assert {a.address for a in real.status.addresses} == {"127.0.0.1"}
    assert real.status.node_info.container_runtime_version == "containerd://2.2.9"
    assert real.status.node_info.kubelet_version == "v1.36.3"
    assert not real.spec.taints
    kwok = [n for n in core.list_node().items if n.metadata.name != NODE_NAME]
    assert len(kwok) == 3 and all(n.spec.taints[0].key == "nvidia.com/gpu" for n in kwok)
    # Its pods' sandbox image came from a local file, not from an image hub.
    assert "localhost/gantry/pause:1" in node.ctr("images", "ls", "-q")


def test_a_training_job_runs_in_a_real_container_with_the_executor_inside(
    gantry, real_node, owner, request
):
    """The digits example in a real pod: its outputs land in Ceph (Gantry's storage on the
    RADOS Gateway, as a lab configures it), uploaded by the executor through Gantry's API.
    (A Ceph cluster of this xdist worker's, about 3 s to start: asked for by name, so the
    module keeps its own xdist group, and one real node per run.)"""
    import hashlib

    request.getfixturevalue("s3_storage")  # after `gantry`, whose storage it replaces

    from datasets import storage
    from jobs.models import Artifact, LogChunk

    _, _, registry, pushed = real_node
    project, ns = real_tenant(gantry, owner, registry, "real")

    begun = time.monotonic()
    job = gantry.submit(
        owner, project, name="digits", cpus=1, memory_mb=1024,
        command=f"python -c {shlex.quote(TRAIN)}",
    )  # fmt: skip
    try:
        gantry.ended(job, timeout=WAIT, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    took = time.monotonic() - begun
    pods = gantry.admin.pods(job)
    assert pods, diagnosis(real_node, job, ns)
    pod = pods[0]
    assert job.state == "succeeded", (job.state_reason, pod.status)
    print(f"submitted to succeeded in {took:.1f} s")
    assert gantry.states(job) == ["queued", "admitted", "starting", "running", "succeeded"]
    assert pod.spec.node_name == NODE_NAME and not pod.spec.host_network
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_SUBNET)
    labels = gantry.admin.core.read_namespace(ns).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert pod.spec.containers[0].image == pushed
    worker = job.worker_set.get()
    assert worker.exit_code == 0
    lines = [line["text"] for c in LogChunk.objects.filter(job=job) for line in c.lines()]
    assert "training on 1200 digits" in lines
    accuracy = next(float(x.split()[1]) for x in lines if x.startswith("accuracy "))
    assert accuracy > 0.85
    artifacts = {a.path: a for a in Artifact.objects.filter(job=job)}
    assert set(artifacts) == {"model.pkl", "probe.json"}
    assert artifacts["model.pkl"].size > 1000
    model = artifacts["model.pkl"]
    stored = storage.s3_client().get_object(
        Bucket=settings_bucket(), Key=model.file.name
    )["Body"].read()
    assert len(stored) == model.size and hashlib.sha256(stored).hexdigest() == model.sha256

    # The pod's security settings, as the real runtime applied them.
    import json

    probe = json.loads(artifacts["probe.json"].file.read())
    assert (probe["uid"], probe["gid"]) == (1000, 1000)
    assert probe["root_fs"] == "Read-only file system"
    assert int(probe["CapEff"], 16) == 0
    assert probe["Seccomp"] == "2"  # filtered: RuntimeDefault
    assert probe["NoNewPrivs"] == "1"
    assert probe["token"] is False


def test_a_pods_log_lines_and_metrics_reach_the_job_pages_websocket_live(
    gantry, real_node, owner, settings, tmp_path
):
    """The path a person watching the job page sees: the executor in the pod posts its
    lines and metrics to Gantry's ASGI server (uvicorn, as deployed), whose websocket
    sends them on to a client connected before the job started, as they come."""
    from websockets.sync.client import connect

    from accounts import services as account_services
    from tests.jobs.test_browser import serving_asgi

    _, node, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "live")
    _, key = account_services.create_api_token(actor=owner, name="watch", scope="read")
    script = (
        "import time\nfrom executor import log_metric\n"
        "for i in range(6):\n"
        "    print(f'tick {i}', flush=True)\n    log_metric('loss', 1 / (i + 1), step=i)\n"
        "    time.sleep(0.5)\n"
    )
    hosts = ",".join([*settings.ALLOWED_HOSTS, GATEWAY])
    with serving_asgi(tmp_path, GANTRY_JOB_BACKEND="kubernetes", ALLOWED_HOSTS=hosts) as (url, _):
        settings.GANTRY_URL = url
        settings.GANTRY_K8S_API_URL = node.expose(url)  # the pods' Gantry
        job = gantry.submit(
            owner, project, name="live", cpus=1, command=f"python -c {shlex.quote(script)}"
        )
        live_lines, points, states = [], [], []
        socket_url = url.replace("http://", "ws://") + f"/ws/jobs/{job.pk}/?after=0"
        headers = {"Authorization": f"Bearer {key}"}
        try:
            with connect(socket_url, origin=url, additional_headers=headers, proxy=None) as ws:
                deadline = time.monotonic() + WAIT
                while "succeeded" not in states:
                    assert time.monotonic() < deadline, (states, live_lines)
                    message = json.loads(ws.recv(timeout=WAIT))
                    if message["type"] == "lines" and message.get("live"):
                        live_lines += [line["text"] for line in message["lines"]]
                    elif message["type"] == "metrics":
                        points += message["points"]
                    elif message["type"] == "status":
                        states.append(message["state"])
        except (AssertionError, TimeoutError) as exc:
            raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    # Each line came live, while the command ran, not in a backfill after it ended.
    assert [t for t in live_lines if t.startswith("tick")] == [f"tick {i}" for i in range(6)]
    assert [(p["step"], p["value"]) for p in points if p["name"] == "loss"] == [
        (i, 1 / (i + 1)) for i in range(6)
    ]
    assert "running" in states and states[-1] == "succeeded"


def test_a_pod_evicted_mid_run_ends_the_attempt_and_the_next_one_runs_to_the_end(
    gantry, real_node, owner
):
    """An eviction (a node drained, a pod preempted) on the real node: kubelet stops the
    container, the attempt is lost, Gantry requeues the job and its next pod succeeds."""
    from jobs.models import LogChunk

    _, _, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "evicted")
    # The first attempt waits to be evicted however late its reports arrive; the retry ends.
    script = (
        "import os, time\nprint('working', flush=True)\n"
        "time.sleep(600 if os.environ['GANTRY_ATTEMPT'] == '1' else 0)\nprint('done')\n"
    )
    job = gantry.submit(
        owner, project, name="evicted", cpus=1, max_retries=1,
        command=f"python -c {shlex.quote(script)}",
    )  # fmt: skip

    def working() -> bool:
        job.refresh_from_db()
        lines = [x["text"] for c in LogChunk.objects.filter(job=job) for x in c.lines()]
        return job.state == "running" and "working" in lines

    try:
        gantry.pump(working, "the command runs", timeout=WAIT, reconcile=job)
        (pod,) = gantry.admin.pods(job)
        gantry.admin.core.create_namespaced_pod_eviction(
            pod.metadata.name, ns, {"metadata": {"name": pod.metadata.name, "namespace": ns}}
        )
        gantry.pump(lambda: (job.refresh_from_db(), job.attempt == 2)[1], "a second attempt")
        assert job.state == "queued", job.state_reason
        assert job.state_reason.startswith("attempt 1 lost"), job.state_reason
        gantry.relaunch(job)
        gantry.ended(job, timeout=WAIT, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    assert job.state == "succeeded", job.state_reason
    assert gantry.states(job) == [
        "queued", "admitted", "starting", "running", "queued",
        "admitted", "starting", "running", "succeeded",
    ]  # fmt: skip
    (pod,) = gantry.admin.pods(job)
    assert pod.metadata.labels["gantry.dev/attempt"] == "2" and pod.spec.node_name == NODE_NAME


def test_an_image_the_registry_does_not_have_fails_the_job_with_the_pull_error(
    gantry, real_node, owner, settings
):
    """The image is gone from the registry (deleted since, or a default image misnamed):
    the real kubelet's pull fails, backs off, and the job ends failed saying so; its pod
    is deleted rather than left backing off."""
    _, _, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "nopull")
    missing = f"{registry.host}/gantry/no-such-image:1"
    settings.GANTRY_K8S_DEFAULT_IMAGE = missing
    job = gantry.submit(owner, project, name="nopull", cpus=1, command="true")
    try:
        gantry.ended(job, timeout=WAIT, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    assert job.state == "failed"
    assert job.state_reason.startswith(f"the image {missing} cannot be pulled: "), job.state_reason
    assert "not found" in job.state_reason, job.state_reason
    assert "running" not in gantry.states(job)
    gantry.pump(lambda: not gantry.admin.pods(job), "its pod deleted")


def test_gantry_exec_runs_a_command_in_the_running_pod_through_the_exec_api(
    gantry, real_node, owner
):
    """`gantry exec` / `gantry shell` on Kubernetes: Gantry's terminal session
    (interactive.terminal.KubernetesSession, what the terminal websocket drives) opens the
    exec API as Gantry's ServiceAccount; the API server reaches kubelet on 127.0.0.1, which
    runs the command in the job's container, as the job's user."""
    from asgiref.sync import async_to_sync

    from interactive import terminal
    from jobs.models import LogChunk
    from jobs.services.lifecycle import cancel_job

    _, _, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "shell")
    script = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
    job = gantry.submit(
        owner, project, name="shell", cpus=1, command=f"python -c {shlex.quote(script)}"
    )

    def ready() -> bool:
        job.refresh_from_db()
        lines = [x["text"] for c in LogChunk.objects.filter(job=job) for x in c.lines()]
        return job.state == "running" and "ready" in lines

    try:
        gantry.pump(ready, "the command runs", timeout=WAIT, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None

    worker = job.worker_set.get()

    def run(command: list[str]) -> tuple[bytes, int]:
        async def scenario():
            session = terminal.open_session(job, worker, command)
            await session.start(80, 24)
            output = b""
            while (chunk := await session.output.get()) is not None:
                output += chunk
            return output, await session.wait()

        return async_to_sync(scenario)()

    output, code = run(["sh", "-c", "id -u; pwd"])
    assert (output.decode().split("\r\n")[:2], code) == (["1000", "/workspace"], 0)
    init, code = run(["cat", "/proc/1/cmdline"])  # the job's container, not the sandbox's
    assert init.split(b"\0")[:3] == [b"python", b"-m", b"executor"] and code == 0
    assert run(["sh", "-c", "exit 3"])[1] == 3
    cancel_job(owner, job)
    gantry.ended(job, timeout=WAIT, reconcile=job)
    assert job.state == "cancelled", job.state_reason


RESUMABLE = """\
import hashlib, os, pickle, time
import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from executor.checkpoints import checkpoint, resume_from
x, y = load_digits(return_X_y=True)
start, model = 0, SGDClassifier(random_state=0)
if resume_from():
    with open(os.path.join(resume_from(), "state.pkl"), "rb") as f:
        start, model = pickle.load(f)
    print("resumed at epoch", start, flush=True)
for epoch in range(start, 8):
    model.partial_fit(x / 16.0, y, classes=np.arange(10))
    with open("state.pkl", "wb") as f:
        pickle.dump((epoch + 1, model), f)
    checkpoint("state.pkl", step=epoch + 1)
    print("epoch", epoch + 1, flush=True)
    # The first attempt waits for its eviction after two checkpoints, however late they land.
    time.sleep(600 if epoch >= 1 and os.environ["GANTRY_ATTEMPT"] == "1" else 1.5)
weights = model.coef_.tobytes() + model.intercept_.tobytes()
print("weights", hashlib.sha256(weights).hexdigest(), flush=True)
"""


def uninterrupted_weights() -> str:
    """RESUMABLE's final weights when nothing stops it, computed here (the same
    scikit-learn as the image's)."""
    import hashlib

    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier

    x, y = load_digits(return_X_y=True)
    model = SGDClassifier(random_state=0)
    for _ in range(8):
        model.partial_fit(x / 16.0, y, classes=np.arange(10))
    return hashlib.sha256(model.coef_.tobytes() + model.intercept_.tobytes()).hexdigest()


def test_an_evicted_job_resumes_from_its_last_checkpoint_to_the_same_weights(
    gantry, real_node, owner
):
    """The executor in the pod uploads each checkpoint the training code saves; after an
    eviction the next attempt's executor stages the last complete one, the code resumes
    from it, and the final weights are those of a run nothing interrupted."""
    from checkpoints.models import Checkpoint
    from jobs.models import LogChunk

    _, _, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "resumed")
    job = gantry.submit(
        owner, project, name="resumed", cpus=1, max_retries=1,
        command=f"python -c {shlex.quote(RESUMABLE)}",
    )  # fmt: skip

    def saved() -> int:
        done = Checkpoint.objects.complete().filter(job=job, attempt=1)
        return max((c.step for c in done), default=0)

    try:
        gantry.pump(lambda: saved() >= 2, "two checkpoints uploaded", WAIT, reconcile=job)
        (pod,) = gantry.admin.pods(job)
        gantry.admin.core.create_namespaced_pod_eviction(
            pod.metadata.name, ns, {"metadata": {"name": pod.metadata.name, "namespace": ns}}
        )
        gantry.pump(lambda: (job.refresh_from_db(), job.attempt == 2)[1], "a second attempt")
        last = saved()
        gantry.relaunch(job)
        gantry.ended(job, timeout=WAIT, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    assert job.state == "succeeded", job.state_reason
    lines = [x["text"] for c in LogChunk.objects.filter(job=job) for x in c.lines()]
    resumed = [int(x.split()[-1]) for x in lines if x.startswith("resumed at epoch")]
    assert resumed and 2 <= resumed[0] <= last < 8, (resumed, last)
    weights = [x.split()[1] for x in lines if x.startswith("weights ")]
    assert weights == [uninterrupted_weights()]


def test_the_node_keeps_the_network_rule_for_pulls_pods_and_names(real_node):
    """A pull from any registry but the test one goes to 127.0.0.1:9 (refused: no name is
    looked up, nothing leaves the machine). The pod network is inside the node's own
    namespace: its only route is the bridge's subnet (no default route, no link but the
    bridge and the pods' ends), a pod gets an address there, and the cluster DNS answers
    cluster names and nothing else."""
    from kubernetes import client

    cluster, node, registry, pushed = real_node
    core = client.CoreV1Api(cluster.client())
    ns = "network-rule"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_secret(ns, pull_secret(registry))
    names = (
        "import socket\n"
        "for name in ('kubernetes.default.svc.cluster.local', 'example.org'):\n"
        "    try:\n        print(name, socket.gethostbyname(name))\n"
        "    except OSError:\n        print(name, 'unresolved')\n"
    )

    def pod(name: str, image: str, command: list[str]) -> dict:
        container = {"name": "c", "image": image, "command": command}
        spec = {"containers": [container], "restartPolicy": "Never"}
        spec["imagePullSecrets"] = [{"name": "gantry-registry"}]
        return {"metadata": {"name": name}, "spec": {"nodeName": NODE_NAME, **spec}}

    core.create_namespaced_pod(ns, pod("hub", "registry.example.org/gantry/x:1", ["/pause"]))
    core.create_namespaced_pod(ns, pod("names", pushed, ["python3", "-c", names]))

    def said(name: str, words: str) -> bool:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}")
        return any(words in (e.message or "") for e in events.items)

    deadline = time.monotonic() + WAIT
    while not (
        said("hub", "127.0.0.1:9")
        and core.read_namespaced_pod("names", ns).status.phase in ("Succeeded", "Failed")
    ):
        assert time.monotonic() < deadline, [
            e.message for e in core.list_namespaced_event(ns).items
        ]
        time.sleep(0.5)
    assert said("hub", "connection refused")
    named = core.read_namespaced_pod("names", ns)
    assert named.status.phase == "Succeeded", named.status
    assert ipaddress.ip_address(named.status.pod_ip) in ipaddress.ip_network(POD_SUBNET)
    lines = core.read_namespaced_pod_log("names", ns).splitlines()
    assert lines == ["kubernetes.default.svc.cluster.local 10.96.0.1", "example.org unresolved"]

    routes = node.netns.ip("-4", "route").splitlines()
    assert sorted(r.split()[:3] for r in routes) == [
        [POD_SUBNET, "dev", "cni0"], [SERVICE_SUBNET, "dev", "cni0"]
    ], routes  # fmt: skip
    links = [line.split(": ")[1].split("@")[0] for line in node.netns.ip("-o", "link").splitlines()]
    assert links[:2] == ["lo", "cni0"] and all(x.startswith("veth") for x in links[2:]), links
    core.delete_namespace(ns)


RENDEZVOUS = """\
import os, socket, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("rank", rank, "of", world, "master", master, flush=True)
if rank == 0:
    with socket.create_server(("", port)) as server:
        conn, peer = server.accept()
        with conn:
            other = int(conn.recv(16))
            conn.sendall(str(rank + other).encode())
    print("rank 0 met rank", other, "from", peer[0], flush=True)
else:
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = socket.create_connection((master, port), timeout=5)
            break
        except OSError:  # pod 0 not up yet, or its name not yet in the DNS
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    with conn:
        peer = conn.getpeername()[0]
        conn.sendall(str(rank).encode())
        conn.shutdown(socket.SHUT_WR)
        total = conn.recv(16).decode()
    print("rank", rank, "reached", master, "at", peer, "sum", total, flush=True)
"""


def test_a_two_pod_distributed_job_rendezvouses_through_its_headless_service(
    gantry, real_node, owner
):
    """A distributed job's two pods (an Indexed Job) meet the way torchrun's static
    rendezvous does: rank 1 finds rank 0 by MASTER_ADDR, `<job>-0.<job>`, the name the
    job's headless Service gives pod 0 in the cluster DNS, and connects to MASTER_PORT over
    the pod network. The image has no PyTorch (its CUDA wheels run to gigabytes), so the
    two exchange their ranks over plain TCP instead of a gloo all-reduce: the same name,
    port and network a DDP job's process group uses (DDP itself is tested on the local
    backend). Nothing in the test cluster enforces the job's NetworkPolicy (no
    policy-capable network plugin)."""
    from jobs.models import LogChunk

    _, _, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "gang")
    job = gantry.submit(
        owner, project, name="gang", kind="distributed", workers=2, cpus=1,
        command=f"python -c {shlex.quote(RENDEZVOUS)}",
    )  # fmt: skip
    try:
        gantry.ended(job, timeout=WAIT, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    assert job.state == "succeeded", diagnosis(real_node, job, ns)
    assert sorted(w.exit_code for w in job.worker_set.all()) == [0, 0]
    pods = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p
            for p in gantry.admin.pods(job)}  # fmt: skip
    ips = {rank: pods[rank].status.pod_ip for rank in ("0", "1")}
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(POD_SUBNET) for ip in ips.values())
    assert ips["0"] != ips["1"] and GATEWAY not in ips.values()
    lines = [x["text"] for c in LogChunk.objects.filter(job=job) for x in c.lines()]
    name = pods["0"].spec.subdomain
    assert f"rank 1 reached {name}-0.{name} at {ips['0']} sum 1" in lines, lines
    assert f"rank 0 met rank 1 from {ips['1']}" in lines, lines


def loopback_ports(*urls: str) -> list[int]:
    """The ports of those URLs that are on the machine's loopback (a server process inside
    the node's namespace reaches them through the node's relays)."""
    from urllib.parse import urlsplit

    found = [urlsplit(url) for url in urls if url]
    return [u.port for u in found if u.hostname in ("127.0.0.1", "localhost") and u.port]


def test_a_notebook_pod_opens_through_the_notebook_origin(
    gantry, real_node, owner, make_user, settings, tmp_path
):
    """A notebook job on the real node, opened as a person opens it: Gantry hands a ticket
    to the notebook origin (interactive.origin under uvicorn), which forwards to the
    notebook's Service by its DNS name, `<job>.<namespace>.svc`. The origin runs where it
    runs in a cluster, on the cluster's network: inside the node's namespace, asking the
    cluster DNS, its ClusterIP made real by kube-proxy's rules (KubeNode.run_inside); the
    test's browser reaches it through a relay on loopback. JupyterLab is the image's own.
    Another tenant's member gets no ticket."""
    from django.test import Client

    from tests.interactive.notebooks import Browser, served_database_url, wait_until_up

    _, node, registry, _ = real_node
    project, ns = real_tenant(gantry, owner, registry, "notebook")
    inside, public = free_port(), free_port()
    origin = f"http://{{job}}.nb.localhost:{public}"
    settings.GANTRY_NOTEBOOK_ORIGIN = origin  # Gantry's tickets send the browser there
    database = served_database_url()
    env = {
        **os.environ,
        "GANTRY_ENV": "development",
        "DATABASE_URL": database,
        "GANTRY_DATA_DIR": str(tmp_path / "data"),
        "SECRET_KEY": settings.SECRET_KEY,
        "LOG_LEVEL": "WARNING",
        "GANTRY_URL": settings.GANTRY_URL,
        "GANTRY_NOTEBOOK_ORIGIN": origin,
        "GANTRY_NOTEBOOK_TIMEOUT_SECONDS": "10",
    }
    argv = [sys.executable, "-m", "uvicorn", "interactive.origin:application", "--host",
            "127.0.0.1", "--port", str(inside), "--lifespan", "off", "--no-access-log"]  # fmt: skip
    needs = loopback_ports(database, os.environ.get("REDIS_URL", ""))
    process = node.run_inside("origin", argv, env, needs, cwd=settings.BASE_DIR)
    node.reach(inside, public)
    wait_until_up(f"http://127.0.0.1:{public}/healthz", "origin", process, node.dir / "origin.log")

    job = gantry.submit(owner, project, name="nb", kind="notebook", cpus=1, memory_mb=1024)
    try:
        gantry.pump(lambda: (job.refresh_from_db(), job.state == "running")[1],
                    "the notebook runs", timeout=WAIT, reconcile=job)  # fmt: skip
        worker = job.worker_set.get()
        (pod,) = gantry.admin.pods(job)
        assert worker.host == f"{pod.metadata.name}.{ns}.svc", worker.host
        assert not pod.spec.host_network
        client = Client()
        client.force_login(owner)
        browser = Browser(public, gantry=client, gantry_url=settings.GANTRY_URL)
        browser.redeem(job.pk, browser.ticket_for(job.pk))
        deadline = time.monotonic() + WAIT
        while (page := browser.request("GET", job.pk, f"/jobs/{job.pk}/lab/lab")).status_code != 200:
            assert page.status_code == 503, (page.status_code, page.text[:300])  # still starting
            assert time.monotonic() < deadline, page.text[:300]
            time.sleep(1)
        assert "JupyterLab" in page.text
        status = browser.request("GET", job.pk, f"/jobs/{job.pk}/lab/api/status")
        assert status.status_code == 200 and "started" in status.json(), status.text[:300]
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n{diagnosis(real_node, job, ns)}\n--- origin\n{node.log_tail('origin')}"
        ) from None

    outsider = Client()
    outsider.force_login(make_user("outsider"))
    start = browser.request("GET", job.pk, f"/jobs/{job.pk}/lab/lab", headers={"Cookie": ""})
    assert start.status_code == 302
    from urllib.parse import urlsplit

    to_gantry = urlsplit(start.headers["location"])
    assert outsider.get(f"{to_gantry.path}?{to_gantry.query}").status_code == 404


def serving_image(flags: list[str]) -> str:
    """The serving image's reference in buildah's storage (platform/dev/images-build)."""
    env = dict(
        line.split("=", 1)
        for line in subprocess.run(
            [str(IMAGES_BUILD), "--env"], check=True, capture_output=True, text=True
        ).stdout.splitlines()
    )
    image = env["GANTRY_SERVING_IMAGE"]
    found = subprocess.run(
        ["buildah", *flags, "inspect", "--type", "image", image], capture_output=True
    )
    if found.returncode != 0:
        unavailable(f"{image} is not built: run platform/dev/images-build")
    return image


def test_an_endpoint_on_the_real_node_answers_through_gantrys_gateway(
    gantry, real_node, owner, settings, tmp_path
):
    """An endpoint on the Kubernetes backend served as it is in production: its
    Deployment's pod runs MLServer (the serving image platform/dev/images-build makes,
    pulled from the test registry) on the real node, its init container fetching the
    model's files from Gantry's API with the endpoint's read-only token; Gantry's ASGI
    app (uvicorn config.asgi) runs where it runs in a cluster, inside the node's
    namespace (KubeNode.run_inside), and its gateway starts the Deployment on the first
    request and forwards a KServe v2 inference call to the version's Service by its DNS
    name. The answer is the model's own predictions. Then, on the same pod network:
    scaled to zero by the minute's pass and back on the next request, and rolled from v1
    to v2 by an alias move with a client calling throughout (no failed request)."""
    import pickle

    from accounts.models import ApiToken
    from cluster.models import KubernetesCluster
    from endpoints import kubernetes as ek
    from endpoints import services
    from modelhub import services as hub
    from tests.endpoints.builders import train_digits_models, upload_mlflow_folder
    from tests.interactive.notebooks import served_database_url, wait_until_up

    _, node, registry, _ = real_node
    image = serving_image(python_image()[1])
    pushed = f"{registry.host}/gantry/serving:{image.rsplit(':', 1)[1]}"
    begun = time.monotonic()
    subprocess.run(
        ["buildah", *python_image()[1], "push", "--quiet", "--tls-verify=false", "--creds",
         f"{USERNAME}:{PASSWORD}", image, f"docker://{pushed}"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    print(f"serving image pushed in {time.monotonic() - begun:.1f} s")

    project, ns = real_tenant(gantry, owner, registry, "serve")
    sample = train_digits_models(tmp_path / "models")
    model = hub.create_model(owner, project, name="digits")
    version = upload_mlflow_folder(owner, model, tmp_path / "models" / "v1")
    v2 = upload_mlflow_folder(owner, model, tmp_path / "models" / "v2")
    hub.set_alias(owner, model, "champion", version.number)
    endpoint = services.create_endpoint(
        owner, project, name="digits", model=model, alias="champion", idle_seconds=60
    )
    assert endpoint.backend == "kubernetes"
    _, secret = services.create_endpoint_token(owner, endpoint, "test")
    predicted = {}
    for number in (1, 2):
        with open(tmp_path / "models" / f"v{number}" / "model.pkl", "rb") as f:
            predicted[f"v{number}"] = [int(p) for p in pickle.load(f).predict(sample["rows"])]
    expected = predicted["v1"]
    assert predicted["v2"] != expected  # the roll below is seen in the answers

    inside, public = free_port(), free_port()
    database = served_database_url()
    env = {
        **os.environ,
        "GANTRY_ENV": "development",
        "DATABASE_URL": database,
        "GANTRY_DATA_DIR": str(tmp_path),  # its files: tmp_path/files, as `gantry` stores
        "SECRET_KEY": settings.SECRET_KEY,
        "LOG_LEVEL": "WARNING",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "GANTRY_URL": settings.GANTRY_URL,
        "GANTRY_JOB_BACKEND": "kubernetes",
        "GANTRY_K8S_API_URL": settings.GANTRY_K8S_API_URL,
        "GANTRY_K8S_ENDPOINT_IMAGE": pushed,
        "GANTRY_K8S_IMAGE_PULL_SECRETS": "gantry-registry",
        "GANTRY_K8S_HOST_NETWORK": "false",
    }
    needs = loopback_ports(database, os.environ.get("REDIS_URL", ""))
    # The cluster Gantry's processes use there is the row the `gantry` fixture made.
    probe = (
        "import django, hashlib; django.setup(); "
        "from jobs.compute import get_backend; ref = get_backend('kubernetes').default_cluster(); "
        "print(ref.name, hashlib.sha256(ref.kubeconfig.encode()).hexdigest())"
    )
    env_probe = {**env, "DJANGO_SETTINGS_MODULE": "config.settings"}
    node.run_inside("cluster-probe", [sys.executable, "-c", probe], env_probe, needs,
                    cwd=settings.BASE_DIR).wait(timeout=60)  # fmt: skip
    import hashlib

    row = KubernetesCluster.objects.get(is_default=True)
    said = node.log_tail("cluster-probe", 1).strip().split()
    assert said == [row.name, hashlib.sha256(row.kubeconfig.encode()).hexdigest()], said

    argv = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host",
            "127.0.0.1", "--port", str(inside), "--lifespan", "off", "--no-access-log"]  # fmt: skip
    process = node.run_inside("gantry-web", argv, env, needs, cwd=settings.BASE_DIR)
    node.reach(inside, public)
    wait_until_up(f"http://127.0.0.1:{public}/healthz", "gantry", process,
                  node.dir / "gantry-web.log")  # fmt: skip

    import httpx

    url = f"http://127.0.0.1:{public}/serve/serve/p/digits/v2/models/digits/infer"
    rows = sample["rows"]
    body = {"inputs": [{"name": "input-0", "shape": [len(rows), 64], "datatype": "FP64",
                        "data": [v for r in rows for v in r]}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {secret}"}
    selector = f"{ek.LABEL_ENDPOINT}={endpoint.pk}"

    def said_so() -> str:
        from kubernetes import client

        core = client.CoreV1Api(real_node[0].client())
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        events = [f"{e.involved_object.name} {e.reason}: {e.message}"
                  for e in core.list_namespaced_event(ns).items]  # fmt: skip
        logs = []
        for p in pods:
            for c in ("fetch-model", "mlserver"):
                try:
                    logs.append(f"--- {p.metadata.name}/{c}\n" + core.read_namespaced_pod_log(
                        p.metadata.name, ns, container=c, tail_lines=30))
                except Exception as exc:  # diagnosis only
                    logs.append(f"--- {p.metadata.name}/{c}: {exc}")
        return "\n".join([
            *(f"pod {p.metadata.name} {p.status.phase} {p.status.init_container_statuses} "
              f"{p.status.container_statuses}" for p in pods),
            *events, *logs,
            "--- gantry", node.log_tail("gantry-web", 40),
            "--- kubelet", node.log_tail("kubelet", 20),
        ])  # fmt: skip

    begun = time.monotonic()
    deadline = begun + WAIT + 60
    while True:
        answer = httpx.post(url, json=body, headers=headers, timeout=WAIT + 60)
        if answer.status_code == 200:
            break
        assert answer.status_code == 503, (answer.status_code, answer.text[:500], said_so())
        assert time.monotonic() < deadline, (answer.text[:500], said_so())
        time.sleep(1)
    cold = time.monotonic() - begun
    print(f"cold start: first request to answer in {cold:.1f} s")
    (output,) = answer.json()["outputs"]
    assert [int(p) for p in output["data"]] == expected, (output, expected)
    assert answer.headers["Gantry-Model-Version"] == f"v{version.number}"
    again = httpx.post(url, json=body, headers=headers, timeout=30)
    assert again.status_code == 200 and again.json()["outputs"][0]["data"] == output["data"]
    # A payload the model refuses is the caller's error, with scikit-learn's words.
    three = {"inputs": [{"name": "input-0", "shape": [1, 3], "datatype": "FP64",
                         "data": [1.0, 2.0, 3.0]}]}  # fmt: skip
    refused = httpx.post(url, json=three, headers=headers, timeout=30)
    assert refused.status_code == 400, (refused.status_code, refused.text[:300])
    assert "expecting 64 features" in refused.text, refused.text[:300]
    # Another endpoint's token reaches nothing.
    assert httpx.post(url, json=body, timeout=30,
                      headers={"Authorization": "Bearer gep_nope"}).status_code == 401  # fmt: skip

    (pod,) = gantry.admin.core.list_namespaced_pod(ns, label_selector=selector).items
    at = {c.type: c.last_transition_time for c in pod.status.conditions}
    print(
        f"of which pod scheduled to initialized (image pulled, model fetched) "
        f"{(at['Initialized'] - at['PodScheduled']).total_seconds():.0f} s, "
        f"initialized to ready (MLServer up, model loaded) "
        f"{(at['Ready'] - at['Initialized']).total_seconds():.0f} s"
    )
    # The gateway's process made the download token, in the test's database.
    assert ApiToken.objects.active().filter(name=f"endpoint {endpoint.pk} on Kubernetes "
                                            "(model download)").count() == 1  # fmt: skip
    assert pod.spec.node_name == NODE_NAME and not pod.spec.host_network
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_SUBNET)
    assert pod.spec.security_context.run_as_non_root and pod.spec.security_context.run_as_user
    for container in [*pod.spec.init_containers, *pod.spec.containers]:
        assert container.image == pushed
        assert container.security_context.read_only_root_filesystem is True
        assert container.security_context.allow_privilege_escalation is False
        assert container.security_context.capabilities.drop == ["ALL"]
    assert not pod.spec.automount_service_account_token

    # Scale to zero on the real node: the minute's pass (run here, past the idle time)
    # sets replicas: 0 and the pod goes; the usage interval closes. The next request
    # through the gateway scales the Deployment back and answers.
    from datetime import timedelta

    from django.utils import timezone

    from endpoints import k8s
    from endpoints.models import ReplicaInterval

    def until(check, what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not check():
            assert time.monotonic() < deadline, f"not within {WAIT} s: {what}\n{said_so()}"
            time.sleep(0.5)

    later = timezone.now() + timedelta(seconds=120)
    assert k8s.scale_idle(now=later)["scaled_to_zero"] == 1
    until(lambda: not gantry.admin.core.list_namespaced_pod(ns, label_selector=selector).items,
          "the pod gone after scale to zero")  # fmt: skip
    assert not ReplicaInterval.objects.filter(endpoint=endpoint, ended_at=None).exists()
    begun = time.monotonic()
    while True:
        answer = httpx.post(url, json=body, headers=headers, timeout=WAIT + 60)
        if answer.status_code == 200:
            break
        assert answer.status_code == 503, (answer.status_code, answer.text[:500], said_so())
        assert time.monotonic() < begun + WAIT + 60, (answer.text[:500], said_so())
        time.sleep(1)
    print(f"back from zero: first request to answer in {time.monotonic() - begun:.1f} s "
          f"(the image on the node)")  # fmt: skip
    assert answer.json()["outputs"][0]["data"] == output["data"]
    assert ReplicaInterval.objects.filter(endpoint=endpoint, ended_at=None).count() == 1

    # A roll on the real node: the alias moves to v2, and a client calling throughout
    # gets only answers (v1's, then v2's), none failed, while v2's pod starts and v1's
    # Deployment goes.
    hub.set_alias(owner, model, "champion", v2.number)
    begun, answered = time.monotonic(), []
    while not answered or answered[-1] != "v2":
        answer = httpx.post(url, json=body, headers=headers, timeout=30)
        assert answer.status_code == 200, (answer.status_code, answer.text[:500], said_so())
        said = answer.headers["Gantry-Model-Version"]
        assert [int(p) for p in answer.json()["outputs"][0]["data"]] == predicted[said]
        answered.append(said)
        assert time.monotonic() < begun + WAIT + 60, (answered[-5:], said_so())
        time.sleep(0.2)
    print(f"roll v1 -> v2: {len(answered)} requests answered, none failed, switched after "
          f"{time.monotonic() - begun:.1f} s")  # fmt: skip
    v1_name = ek.version_object_name(endpoint.pk, version.number)
    until(lambda: k8s.read(k8s._cluster()[0], ns, v1_name) is None, "v1's Deployment deleted")
    until(lambda: not ReplicaInterval.objects.filter(replica=v1_name, ended_at=None).exists(),
          "v1's usage interval closed")  # fmt: skip
    (running,) = ReplicaInterval.objects.filter(endpoint=endpoint, ended_at=None)
    assert running.replica == ek.version_object_name(endpoint.pk, v2.number)


DDP = """\
import os, time, torch, torch.distributed as dist
from sklearn.datasets import load_digits
started = time.monotonic()
dist.init_process_group("gloo")  # env://: MASTER_ADDR (<job>-0.<job>), MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
print("rank", rank, "of", world, "joined in", round(time.monotonic() - started, 1), "s", flush=True)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print("rank", rank, "all_reduce", int(total.item()), flush=True)
torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.data[rank::world] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target[rank::world])
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(30):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()  # gradients averaged over both ranks by gloo
    optimizer.step()
weights = sum(p.detach().double().sum().item() for p in model.parameters())
accuracy = (model(x).argmax(1) == y).float().mean().item()
print("rank", rank, "weights", f"{weights:.6f}", "accuracy", f"{accuracy:.3f}", flush=True)
dist.destroy_process_group()
"""

PYTORCH_IMAGE = "localhost/gantry/pytorch:2.7.1-local"  # bench/image_catalog.py's


@pytest.mark.big_image
def test_a_ddp_job_all_reduces_over_gloo_across_two_real_pods(gantry, real_node, owner, settings):
    """DDP over gloo across the real node's pod network, in the catalog's PyTorch image
    (6 GB: `make test-k8s-ddp` builds it with `make image-pytorch` and runs this; not in
    `make test`, where the 2-pod rendezvous above checks the same names and ports over
    plain TCP). The two ranks meet through the job's headless Service, all-reduce a
    tensor, and train a DDP model on their halves of the digits: after the last step both
    hold the same weights, as DDP's gradient averaging promises."""
    from jobs.models import LogChunk

    _, flags = python_image()
    if subprocess.run(["buildah", *flags, "inspect", "--type", "image", PYTORCH_IMAGE],
                      capture_output=True).returncode:  # fmt: skip
        pytest.fail(f"{PYTORCH_IMAGE} is not built: run `make image-pytorch` first")
    _, _, registry, _ = real_node
    pushed = f"{registry.host}/gantry/pytorch:2.7.1-local"
    begun = time.monotonic()
    subprocess.run(
        ["buildah", *flags, "push", "--quiet", "--disable-compression", "--tls-verify=false",
         "--creds", f"{USERNAME}:{PASSWORD}", PYTORCH_IMAGE, f"docker://{pushed}"],
        check=True, capture_output=True, timeout=1200,
    )  # fmt: skip
    pushed_s = time.monotonic() - begun
    settings.GANTRY_K8S_DEFAULT_IMAGE = pushed
    project, ns = real_tenant(gantry, owner, registry, "ddp")
    begun = time.monotonic()
    job = gantry.submit(
        owner, project, name="ddp", kind="distributed", workers=2, cpus=1, memory_mb=3072,
        command=f"python -c {shlex.quote(DDP)}",
    )  # fmt: skip
    try:
        gantry.ended(job, timeout=1200, reconcile=job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(real_node, job, ns)}") from None
    took = time.monotonic() - begun
    assert job.state == "succeeded", diagnosis(real_node, job, ns)
    lines = [x["text"] for c in LogChunk.objects.filter(job=job) for x in c.lines()]
    assert "rank 0 all_reduce 3" in lines and "rank 1 all_reduce 3" in lines, lines
    said = {int(x.split()[1]): x.split() for x in lines if " weights " in x}
    assert sorted(said) == [0, 1], lines
    assert said[0][3] == said[1][3], said  # the same weights on both ranks
    assert all(float(s[5]) > 0.85 for s in said.values()), said
    pods = gantry.admin.pods(job)
    assert len({p.status.pod_ip for p in pods}) == 2
    times = {
        "image": PYTORCH_IMAGE,
        "push_uncompressed_s": round(pushed_s, 1),
        "submit_to_succeeded_s": round(took, 1),
        "ranks": {rank: {"weights": s[3], "accuracy": float(s[5])} for rank, s in said.items()},
        "joined": [x for x in lines if " joined in " in x],
    }
    print(json.dumps(times, indent=2))
    out = Path(settings.BASE_DIR) / "bench" / "results" / "k8s_ddp.json"
    out.write_text(json.dumps(times, indent=2) + "\n")
