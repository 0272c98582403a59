"""The Kubernetes backend and its watch-and-reconcile logic, with real objects flowing through.

No Kubernetes cluster can run where these tests run, so the API server is replaced at
its HTTP boundary by tests/jobs/k8s_fake_api.py — the only stand-in here. Everything
on Gantry's side is real: the official client, its JSON (de)serialization and its
`watch.Watch` stream; Gantry's submit, admission, launch, services and state machine.
What the fake cannot do — schedule pods, pull images, run containers — the tests
play by streaming the watch events a real cluster would send (V1Pod JSON as the API
server writes it), including an ERROR 410 Gone. Tests against a real cluster are in
test_k8s_live.py.
"""

import json
import threading
from datetime import UTC, datetime, timedelta

import kubernetes_validate
import pytest

from cluster.models import KubernetesCluster
from interactive.services import notebook_target
from jobs.compute import get_backend, reset_backends
from jobs.compute.kubernetes import manifests as m
from jobs.compute.kubernetes.client import ClusterRef
from jobs.compute.kubernetes.watch import assess_pod, watches_for
from jobs.models import Job, JobWorker
from jobs.services.ingestion import record_worker_status
from jobs.services.launch import device_holder, executor_job, job_spec_for_executor, launch_job
from jobs.services.lifecycle import cancel_job, end_attempt, reconcile_job
from jobs.services.submit import submit_job
from scheduling.admission import admission_pass
from scheduling.models import TenantQuota

from .k8s_fake_api import FakeKubeAPI

IMAGE = "registry.example.org/lab-a/missing:1"


def node(name, gpus=0, model="", cpu="16", memory="64Gi", ready="True", unschedulable=False):
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model} if model else {}},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


@pytest.fixture
def kube(db, settings, tmp_path):
    fake = FakeKubeAPI().start()
    fake.put("nodes", node("gpu-1", gpus=4, model="NVIDIA-A100-SXM4-80GB"))
    fake.put("nodes", node("cpu-1", cpu="7910m", memory="31Gi"))
    fake.put("nodes", node("cordoned", gpus=8, unschedulable=True))
    KubernetesCluster.objects.create(name="fake", kubeconfig=fake.kubeconfig(), is_default=True)
    settings.GANTRY_JOB_BACKEND = "kubernetes"
    settings.GANTRY_K8S_API_URL = "http://gantry-web.gantry.svc:8000"
    settings.GANTRY_K8S_DEFAULT_IMAGE = IMAGE
    settings.GANTRY_K8S_API_TIMEOUT_SECONDS = 5.0
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    reset_backends()
    yield fake
    reset_backends()
    fake.stop()


def launch(owner, project, **spec):
    """Submit, admit and launch a job as the background tasks would."""
    spec.setdefault("command", "python train.py")
    job = submit_job(owner, project, **spec)
    admission_pass()
    job.refresh_from_db()
    assert job.state == "admitted", job.state_reason
    assert launch_job(job)
    get_backend("kubernetes").finish_launches()  # its API creates ran in the launch pool
    job.refresh_from_db()
    return job


def pod_json(job, *, rank=0, attempt=None, phase="Pending", state=None, conditions=(), node_name=None, deleting=False):
    attempt = attempt or job.attempt
    spec = m.JobSpec(id=job.pk, attempt=attempt, kind=job.kind, tenant_slug="lab-a")
    labels = {**m.labels(spec), m.LABEL_RANK: str(rank)}
    meta = {
        "name": f"{m.object_name(spec)}-{rank}-x7k2p",
        "namespace": "gantry-lab-a",
        "labels": labels,
        "annotations": {m.INDEX_ANNOTATION: str(rank)} if job.kind == "distributed" else {},
        "resourceVersion": "0",
        "uid": f"pod-{job.pk}-{attempt}-{rank}",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase, "conditions": list(conditions)}
    if state is not None:
        status["containerStatuses"] = [
            {"name": "executor", "image": IMAGE, "imageID": "", "ready": False,
             "restartCount": 0, "state": state}
        ]
    pod_spec = {
        "containers": [
            {"name": "executor", "image": IMAGE,
             "resources": {"limits": {"memory": f"{job.memory_mb}Mi"}}}
        ]
    }
    if node_name:
        pod_spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec, "status": status}


def event(kind, obj, version):
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["resourceVersion"] = str(version)
    return {"type": kind, "object": obj}


def pod_watch(kube):
    backend = get_backend()
    return watches_for(backend, backend.default_cluster())[0]


def deserialize_pod(data):
    from kubernetes import client

    return client.ApiClient().deserialize(json.dumps(data), "V1Pod", "application/json")


# --- capacity ---------------------------------------------------------------------------


def test_capacity_and_nodes_come_from_ready_schedulable_nodes(kube):
    backend = get_backend()
    capacity = backend.capacity()
    assert capacity.gpu_count == 4  # the cordoned node's 8 GPUs do not count
    assert capacity.cpus == 23  # 16 + 7.91, whole CPUs
    assert capacity.memory_mb == (64 + 31) * 1024
    nodes = {n.name: n for n in backend.nodes()}
    assert set(nodes) == {"gpu-1", "cpu-1"}
    assert nodes["gpu-1"].gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert nodes["cpu-1"].cpus == pytest.approx(7.91)


# --- launching and cancelling -----------------------------------------------------------


def test_launch_creates_namespace_quota_secret_and_job_all_schema_valid(kube, owner, project):
    TenantQuota.objects.create(tenant=project.tenant, guaranteed_gpus=2, borrow_limit_gpus=1, max_cpus=32)
    job = launch(owner, project, gpus=1, max_retries=2)
    assert job.state == "starting"
    created = {(r["resource"], r["name"]): r["body"] for r in kube.made("POST")}
    assert ("namespaces", "gantry-lab-a") in created
    quota = created[("resourcequotas", "gantry-quota")]
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "3", "requests.cpu": "32"}
    name = f"gantry-job-{job.pk}-a1"
    secret = created[("secrets", f"{name}-token")]
    token = secret["stringData"]["0"]
    assert executor_job(job.pk, token) == (job, 0)  # the executor's token works
    k8s_job = created[("jobs", name)]
    assert k8s_job["spec"]["backoffLimit"] == 0
    assert k8s_job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    # What went over the wire is valid Kubernetes, strictly.
    for body in created.values():
        kubernetes_validate.validate(body, "1.31.0", strict=True)
    # The Secret is owned by the Job: deleting the Job (or its TTL) removes it. The Job
    # is created first, so the Secret is created owned (two requests, no patch).
    assert [r["resource"] for r in kube.made("POST") if r["resource"] in ("jobs", "secrets")] == [
        "jobs", "secrets"]
    owner_ref = secret["metadata"]["ownerReferences"][0]
    assert (owner_ref["kind"], owner_ref["name"]) == ("Job", name)
    assert owner_ref["uid"] == kube.get("jobs", "gantry-lab-a", name)["metadata"]["uid"]
    assert not kube.made("PATCH")
    assert job.placement["namespace"] == "gantry-lab-a"
    assert job.placement["cluster"] == "fake"


def test_second_launch_in_a_namespace_updates_the_quota(kube, owner, project, monkeypatch):
    from jobs.compute.kubernetes import backend as kubernetes

    launch(owner, project)
    TenantQuota.objects.create(tenant=project.tenant, guaranteed_gpus=1)
    launch(owner, project)  # within TENANT_CHECK_SECONDS: not even recomputed
    assert not kube.made("PUT", "resourcequotas")
    monkeypatch.setattr(kubernetes, "TENANT_CHECK_SECONDS", 0)  # the window has passed
    launch(owner, project)
    put = kube.made("PUT", "resourcequotas")[-1]["body"]
    assert put["spec"]["hard"] == {"requests.nvidia.com/gpu": "1"}


def test_cancel_deletes_the_job_with_foreground_propagation(kube, owner, project):
    job = launch(owner, project)
    cancel_job(owner, job)
    delete = kube.made("DELETE", "jobs")[-1]
    assert delete["name"] == f"gantry-job-{job.pk}-a1"
    assert "Foreground" in (delete["query"].get("propagationPolicy"), (delete["body"] or {}).get("propagationPolicy"))
    assert kube.get("jobs", "gantry-lab-a", delete["name"]) is None


def test_notebook_is_a_pod_and_service_reached_through_the_proxy_target(kube, owner, project):
    job = launch(owner, project, kind="notebook")
    name = f"gantry-job-{job.pk}-a1"
    assert kube.get("pods", "gantry-lab-a", name) is not None
    assert kube.get("services", "gantry-lab-a", name)["spec"]["type"] == "ClusterIP"
    JobWorker.objects.filter(job=job).update(state="running")
    Job.objects.filter(pk=job.pk).update(state="running")
    job.refresh_from_db()
    host, port, token, base = notebook_target(job)
    assert (host, port, base) == (f"{name}.gantry-lab-a.svc", 8888, f"/jobs/{job.pk}/lab/")
    worker = JobWorker.objects.get(job=job)
    assert token and get_backend().environment(job, worker)["JUPYTER_TOKEN"] == token
    assert "--ServerApp.ip=0.0.0.0" in get_backend().command(job, worker)


def test_distributed_spec_env_does_not_override_the_pods_rank(kube, owner, project):
    job = launch(owner, project, kind="distributed", workers=2)
    worker = JobWorker.objects.get(job=job, rank=1)
    env = job_spec_for_executor(job, 1)["env"]
    assert not {"RANK", "PET_NODE_RANK", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES"} & set(env)
    assert worker.workdir == f"k8s://fake/gantry-lab-a/gantry-job-{job.pk}-a1"
    assert kube.get("services", "gantry-lab-a", f"gantry-job-{job.pk}-a1")["spec"]["clusterIP"] == "None"


def test_a_kubeconfig_that_does_not_work_fails_the_job_in_plain_words(kube, owner, project):
    KubernetesCluster.objects.update(kubeconfig=kube.kubeconfig().replace('"fake"', '"other"', 1))
    reset_backends()
    job = Job.objects.create(project=project, created_by=owner, backend="kubernetes", state="admitted", command="python x.py")
    JobWorker.objects.create(job=job, rank=0)
    launch_job(job)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "the kubeconfig of cluster fake does not work" in job.state_reason


def test_a_cluster_that_does_not_answer_fails_the_job_in_plain_words(kube, owner, project):
    KubernetesCluster.objects.update(kubeconfig=kube.kubeconfig().replace(kube.url, "http://127.0.0.1:9"))
    reset_backends()
    job = Job.objects.create(project=project, created_by=owner, backend="kubernetes", state="admitted", command="python x.py")
    JobWorker.objects.create(job=job, rank=0)
    launch_job(job)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "could not start: the Kubernetes cluster fake does not answer" in job.state_reason


# --- watch and reconcile ----------------------------------------------------------------


def test_image_pull_errors_become_the_reason_and_nothing_is_left_running(kube, owner, project):
    job = launch(owner, project)
    pull_failed = {"waiting": {"reason": "ErrImagePull", "message": f'failed to pull "{IMAGE}": not found'}}
    backoff = {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{IMAGE}"'}}
    kube.script_watch("pods", event("MODIFIED", pod_json(job, state=pull_failed), 201))
    watch = pod_watch(kube)
    watch.watch_once()
    job.refresh_from_db()
    assert job.state == "starting"
    assert job.state_reason == f'pulling the image {IMAGE} failed, retrying: failed to pull "{IMAGE}": not found'
    kube.script_watch("pods", event("MODIFIED", pod_json(job, state=backoff), 202))
    watch.watch_once()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.state_reason == f'the image {IMAGE} cannot be pulled: Back-off pulling image "{IMAGE}"'
    assert kube.get("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a1") is None  # deleted
    watches = [r for r in kube.made("GET", "pods") if r["query"].get("watch")]
    # Each watch resumes from the last resourceVersion seen.
    assert [w["query"]["resourceVersion"] for w in watches][1] == "201"


def test_oom_killed_fails_the_attempt_and_gantry_retries(kube, owner, project):
    job = launch(owner, project, memory_mb=2048, max_retries=1)
    oom = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    kube.script_watch("pods", event("MODIFIED", pod_json(job, phase="Failed", state=oom), 301))
    pod_watch(kube).watch_once()
    job.refresh_from_db()
    assert job.state == "queued"
    assert job.attempt == 2
    assert "out of memory: the container went over its memory limit of 2048Mi" in job.state_reason
    assert "retrying, 2 of 2" in job.state_reason


def test_unschedulable_waits_with_the_reason_then_fails(kube, owner, project, settings):
    settings.GANTRY_K8S_UNSCHEDULABLE_SECONDS = 600
    job = launch(owner, project, gpus=1)
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    recent = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def unschedulable(since):
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastTransitionTime": since}
        return pod_json(job, conditions=[cond])

    kube.script_watch("pods", event("ADDED", unschedulable(recent), 401))
    watch = pod_watch(kube)
    watch.watch_once()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("starting", f"waiting for a node: {message}")
    assert JobWorker.objects.get(job=job).last_heartbeat_at is not None  # vouched for
    kube.script_watch("pods", event("MODIFIED", unschedulable(old), 402))
    watch.watch_once()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.state_reason == f"no node can run it (waited 10 min for one): {message}"


def test_410_gone_relists_and_resumes_from_the_new_version(kube, owner, project):
    job = launch(owner, project)
    gone = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                         "message": "too old resource version: 1 (500)",
                                         "reason": "Expired", "code": 410}}
    kube.script_watch("pods", gone)
    watch = pod_watch(kube)
    watch.watch_once()
    assert watch.relists == 2  # the first list, and the one after 410
    # The pod existed while the watch was broken: the re-list reports it.
    done = {"terminated": {"reason": "Completed", "exitCode": 0}}
    kube.put("pods", pod_json(job, phase="Succeeded", state=done))
    kube.script_watch("pods", gone)
    watch.watch_once()
    job.refresh_from_db()
    assert job.state == "succeeded"
    versions = [r["query"].get("resourceVersion") for r in kube.made("GET", "pods") if r["query"].get("watch")]
    assert versions[0] == versions[1] != None  # noqa: E711 - a 410 is not resumed from


def test_exit_reported_by_the_cluster_when_the_executor_could_not(kube, owner, project):
    job = launch(owner, project, kind="distributed", workers=2)
    failed = {"terminated": {"reason": "Error", "exitCode": 3, "message": "Traceback: boom"}}
    kube.script_watch(
        "pods",
        event("MODIFIED", pod_json(job, rank=0, phase="Running", state={"running": {}}, node_name="gpu-1"), 501),
        event("MODIFIED", pod_json(job, rank=1, phase="Failed", state=failed, node_name="cpu-1"), 502),
    )
    pod_watch(kube).watch_once()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.state_reason == "worker 1 exited with code 3 (Traceback: boom)"
    assert job.placement["hosts"] == {"0": "gpu-1", "1": "cpu-1"}
    assert job.placement["nodes"] == {"gpu-1": 1, "cpu-1": 1}


def test_pods_of_an_attempt_that_is_over_are_deleted(kube, owner, project):
    job = launch(owner, project, max_retries=1)
    end_attempt(job, "failed", "boom")  # attempt 2 is queued
    stale = pod_json(job, attempt=1, phase="Running", state={"running": {}})
    kube.put("jobs", {"metadata": {"name": f"gantry-job-{job.pk}-a1", "namespace": "gantry-lab-a"}})
    kube.script_watch("pods", event("MODIFIED", stale, 601))
    pod_watch(kube).watch_once()
    deletes = [r["name"] for r in kube.made("DELETE", "jobs")]
    assert f"gantry-job-{job.pk}-a1" in deletes


def test_reconcile_marks_a_worker_lost_when_its_kubernetes_job_is_gone(kube, owner, project):
    job = launch(owner, project)
    name = f"gantry-job-{job.pk}-a1"
    # Pending pod: the cluster vouches for the worker, reconcile keeps it.
    kube.put("pods", pod_json(job, state={"waiting": {"reason": "ContainerCreating"}}))
    assert reconcile_job(job) is None
    job.refresh_from_db()
    assert job.state == "starting"
    # Deleted behind Gantry's back: lost.
    kube.objects.clear()
    assert reconcile_job(job) == "lost"
    job.refresh_from_db()
    assert job.state == "lost"
    assert f"its Kubernetes Job gantry-lab-a/{name} no longer exists" in job.state_reason


def test_assess_pod_reads_evictions_and_config_errors():
    class J:
        pk, attempt, kind, memory_mb = 1, 1, "train", 1024

    evicted = pod_json(J, phase="Failed", conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
         "message": "The node was low on resource: memory."}])
    verdict = assess_pod(deserialize_pod(evicted))
    assert verdict.status == "lost"
    assert "TerminationByKubelet: The node was low on resource: memory." in verdict.reason
    config_error = pod_json(J, state={"waiting": {"reason": "CreateContainerConfigError",
                                                  "message": 'secret "x" not found'}})
    verdict = assess_pod(deserialize_pod(config_error))
    assert (verdict.status, verdict.reason) == (
        "failed", 'the container could not be created: secret "x" not found')


def test_raw_json_pods_read_as_the_client_models_do():
    """The watcher reads pods as raw JSON (`Raw`), not V1Pod: every verdict is the same."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.compute.kubernetes.watch import Raw, pod_rank

    class J:
        pk, attempt, kind, memory_mb = 1, 1, "train", 1024

    old = (timezone.now() - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = [
        pod_json(J, phase="Failed", conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting"}]),
        pod_json(J, state={"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}),
        pod_json(J, phase="Failed", state={"terminated": {"reason": "OOMKilled", "exitCode": 137}}),
        pod_json(J, phase="Failed", state={"terminated": {"reason": "Error", "exitCode": 3,
                                                          "message": "boom"}}),
        pod_json(J, rank=1, phase="Running", state={"running": {}}, node_name="gpu-1"),
        pod_json(J, conditions=[{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": "0/3 nodes",
                                 "lastTransitionTime": old}]),
    ]
    verdicts = [assess_pod(Raw(pod)) for pod in pods]
    assert verdicts == [assess_pod(deserialize_pod(pod)) for pod in pods]
    assert [v.status for v in verdicts] == ["lost", "failed", "failed", "failed", "running", "failed"]
    raw = Raw(pods[4])
    assert (pod_rank(raw), raw.spec.node_name, raw.metadata.deletion_timestamp) == (1, "gpu-1", None)
    cond = Raw(pods[5]).status.conditions[0]
    assert cond.last_transition_time < timezone.now() - timedelta(hours=1)


def test_cluster_ref_from_environment_when_none_registered(db, monkeypatch):
    from jobs.compute.kubernetes.client import registered_clusters

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert registered_clusters() == [ClusterRef("default", in_cluster=True)]


def test_k8s_watch_command_lists_and_reports(kube, owner, project):
    from io import StringIO

    from django.core.management import call_command

    job = launch(owner, project)
    backoff = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    kube.put("pods", pod_json(job, state=backoff))
    out = StringIO()
    call_command("k8s_watch", "--once", stdout=out)
    assert "listed 2 resources on 1 cluster(s)" in out.getvalue()
    job.refresh_from_db()
    assert job.state == "failed" and "cannot be pulled" in job.state_reason


# --- pods the cluster refuses to create; pods the cluster stops -------------------------

QUOTA_REFUSAL = (
    'Error creating: pods "gantry-job-{pk}-a1-x7k2p" is forbidden: exceeded quota: gantry-quota, '
    "requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, "
    "limited: requests.nvidia.com/gpu=3"
)


def stamp(delta=timedelta()):
    return (datetime.now(UTC) - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def failed_create(kube, job, message, since):
    """The Job controller's event on a Job whose pod the API server refused."""
    name = f"gantry-job-{job.pk}-a{job.attempt}"
    return kube.put("events", {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.17f3a", "namespace": "gantry-lab-a"},
        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": name,
                           "namespace": "gantry-lab-a"},
        "reason": "FailedCreate", "type": "Warning", "message": message,
        "source": {"component": "job-controller"},
        "firstTimestamp": since, "lastTimestamp": stamp(), "count": 3,
    })


def k8s_job_event(kube, job, version, **status):
    """The batch Job as the API server has it: by default no pod active, none finished."""
    obj = json.loads(json.dumps(kube.get("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a{job.attempt}")))
    obj["status"] = {"startTime": stamp(), **status}
    return event("MODIFIED", obj, version)


def job_watch():
    backend = get_backend()
    return watches_for(backend, backend.default_cluster())[1]


def test_pods_refused_by_the_quota_wait_with_the_reason_then_fail_and_are_deleted(kube, owner, project, settings):
    settings.GANTRY_K8S_UNSCHEDULABLE_SECONDS = 600
    job = launch(owner, project, gpus=1)
    name = f"gantry-job-{job.pk}-a1"
    refusal = failed_create(kube, job, QUOTA_REFUSAL.format(pk=job.pk), stamp())
    kube.script_watch("jobs", k8s_job_event(kube, job, 701))
    watch = job_watch()
    watch.watch_once()
    job.refresh_from_db()
    assert job.state == "starting"
    detail = ("exceeded quota: gantry-quota, requested: requests.nvidia.com/gpu=4, "
              "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=3")
    assert job.state_reason == (
        f"waiting: the cluster refuses to create its pods, the namespace's ResourceQuota is used up ({detail})"
    )
    assert job.events.filter(reason=job.state_reason).count() == 1  # on the timeline, once
    assert JobWorker.objects.get(job=job).last_heartbeat_at is not None  # vouched for
    assert kube.get("jobs", "gantry-lab-a", name) is not None  # it may still pass
    lookups = kube.made("GET", "events")
    assert lookups and lookups[-1]["query"]["fieldSelector"] == (
        f"involvedObject.kind=Job,involvedObject.name={name},reason=FailedCreate")
    # Still refused after GANTRY_K8S_UNSCHEDULABLE_SECONDS: the attempt fails, the Job goes.
    refusal["firstTimestamp"] = stamp(timedelta(hours=1))
    kube.script_watch("jobs", k8s_job_event(kube, job, 702))
    watch.watch_once()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.state_reason == (
        f"the cluster refused to create its pods for 10 min: the namespace's ResourceQuota is used up ({detail})"
    )
    assert kube.get("jobs", "gantry-lab-a", name) is None
    assert kube.made("DELETE", "jobs")[-1]["name"] == name


def test_a_webhook_denial_fails_the_attempt_at_once_through_reconcile(kube, owner, project):
    job = launch(owner, project, max_retries=1)
    name = f"gantry-job-{job.pk}-a1"
    failed_create(kube, job, (
        f'Error creating: admission webhook "validate.kyverno.svc" denied the request: '
        f'pods "{name}-x7k2p" must not use images from registry.example.org'), stamp())
    # No pod and no watcher running: the reconcile task's probe finds the refusal.
    assert reconcile_job(job) is None
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2  # a failed attempt, retried as usual
    assert ("attempt 1 failed (the cluster refused to create its pods: an admission webhook denied "
            "them (admission webhook \"validate.kyverno.svc\" denied the request") in job.state_reason
    assert kube.get("jobs", "gantry-lab-a", name) is None


def test_a_limitrange_refusal_fails_at_once_from_the_job_watch(kube, owner, project):
    job = launch(owner, project)
    failed_create(kube, job, (
        f'Error creating: pods "gantry-job-{job.pk}-a1-x7k2p" is forbidden: '
        "maximum cpu usage per Container is 2, but limit is 4"), stamp())
    kube.script_watch("jobs", k8s_job_event(kube, job, 801))
    job_watch().watch_once()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.state_reason == (
        "the cluster refused to create its pods: they break the namespace's LimitRange "
        "(maximum cpu usage per Container is 2, but limit is 4)")


def test_a_job_whose_pods_exist_does_not_look_up_events(kube, owner, project):
    job = launch(owner, project)
    kube.get("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a1")["status"] = {"active": 1}
    kube.script_watch("jobs", k8s_job_event(kube, job, 901, active=1))
    job_watch().watch_once()
    assert not kube.made("GET", "events")
    job.refresh_from_db()
    assert job.state == "starting"


def running(job):
    JobWorker.objects.filter(job=job).update(state="running")
    Job.objects.filter(pk=job.pk).update(state="running")
    job.refresh_from_db()
    return job


def test_an_evicted_pod_is_lost_and_retried_once_its_executor_has_saved(kube, owner, project):
    job = running(launch(owner, project, max_retries=1))
    eviction = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting", "lastTransitionTime": stamp()}
    drained = pod_json(job, phase="Running", state={"running": {}}, deleting=True,
                       conditions=[eviction])
    kube.script_watch("pods", event("MODIFIED", drained, 1001))
    pod_watch(kube).watch_once()
    # Its grace period: the SIGTERMed executor uploads its last checkpoint and outputs
    # into the attempt, which must still be there to take them.
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 1
    assert assess_pod(deserialize_pod(drained)).reason == (
        "stopped by the cluster (EvictionByEvictionAPI: Eviction API: evicting); "
        "its executor is saving its work")
    # Then it reports "cancelled": no one asked, so the worker is lost and retried.
    record_worker_status(job, 0, {"event": "exited", "outcome": "cancelled",
                                               "exit_code": 143, "reason": "cancelled: executor received SIGTERM"})
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2
    assert job.state_reason == (
        "attempt 1 lost (stopped by the cluster (executor received SIGTERM)); retrying, 2 of 2")
    # The container's end, seen afterwards, changes nothing.
    ended = pod_json(job, attempt=1, phase="Failed", deleting=True, conditions=[eviction],
                     state={"terminated": {"reason": "Error", "exitCode": 143}})
    kube.script_watch("pods", event("MODIFIED", ended, 1002))
    pod_watch(kube).watch_once()
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2


def test_an_evicted_pod_whose_executor_never_reports_is_lost_when_its_container_ends(
    kube, owner, project
):
    job = running(launch(owner, project, max_retries=1))
    ended = pod_json(job, phase="Running", deleting=True, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": stamp()}],
        state={"terminated": {"reason": "Error", "exitCode": 137}})
    kube.script_watch("pods", event("MODIFIED", ended, 1051))
    pod_watch(kube).watch_once()
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2
    assert job.state_reason == (
        "attempt 1 lost (stopped by the cluster (EvictionByEvictionAPI: Eviction API: evicting)); "
        "retrying, 2 of 2")


def test_node_pressure_eviction_of_an_exited_container_is_lost_not_failed(kube, owner, project):
    job = running(launch(owner, project))
    evicted = pod_json(job, phase="Failed", state={"terminated": {"reason": "Error", "exitCode": 143}})
    evicted["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    kube.script_watch("pods", event("MODIFIED", evicted, 1101))
    pod_watch(kube).watch_once()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (
        "lost", "stopped by the cluster (Evicted: The node was low on resource: memory.)")


def test_the_executors_cancelled_before_the_watcher_sees_the_eviction_is_lost(kube, owner, project):
    """The executor's report can come first: Gantry asked no one to stop, so it is lost."""
    job = running(launch(owner, project, max_retries=1))
    record_worker_status(job, 0, {"event": "exited", "outcome": "cancelled", "exit_code": 143,
                                               "reason": "cancelled: executor received SIGTERM"})
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2
    assert job.state_reason == (
        "attempt 1 lost (stopped by the cluster (executor received SIGTERM)); retrying, 2 of 2")
    preempted = pod_json(job, attempt=1, phase="Failed", conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
         "message": "Preempted by pod 1234 on node gpu-1"}])
    kube.script_watch("pods", event("MODIFIED", preempted, 1201))
    pod_watch(kube).watch_once()  # the pod of an attempt that is over: no second retry
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2


def test_a_job_failed_by_its_pod_failure_policy_after_an_eviction_is_lost(kube, owner, project):
    """The Job watch may hear first: the evicted executor's exit 143 matched the
    podFailurePolicy's exit-code rule, but the pod says the cluster stopped it."""
    job = running(launch(owner, project, max_retries=1))
    name = f"gantry-job-{job.pk}-a1"
    drained = pod_json(job, phase="Failed", state={"terminated": {"reason": "Error", "exitCode": 143}},
                       conditions=[{"type": "DisruptionTarget", "status": "True",
                                    "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}])
    kube.put("pods", drained)
    failed = k8s_job_event(kube, job, 1301, failed=1, conditions=[
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
         "message": f"Container executor for pod gantry-lab-a/{name}-0-x7k2p failed with exit code 143 "
                    "matching FailJob rule at index 0"}])
    kube.script_watch("jobs", failed)
    job_watch().watch_once()
    job.refresh_from_db()
    assert job.state == "queued" and job.attempt == 2
    assert job.state_reason == (
        "attempt 1 lost (stopped by the cluster (EvictionByEvictionAPI: Eviction API: evicting)); "
        "retrying, 2 of 2")


def test_a_job_failed_by_its_pod_failure_policy_for_an_exit_code_is_failed(kube, owner, project):
    job = running(launch(owner, project))
    name = f"gantry-job-{job.pk}-a1"
    kube.put("pods", pod_json(job, phase="Failed", state={"terminated": {"reason": "Error", "exitCode": 2}}))
    message = f"Container executor for pod gantry-lab-a/{name}-0-x7k2p failed with exit code 2 matching FailJob rule at index 0"
    failed = k8s_job_event(kube, job, 1401, failed=1, conditions=[
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": message}])
    kube.script_watch("jobs", failed)
    job_watch().watch_once()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("failed", f"Kubernetes failed the job (PodFailurePolicy: {message})")


def test_a_worker_the_cluster_placed_elsewhere_blocks_no_launch(kube, owner, project):
    """The scheduler put job a's pod on the node Gantry had planned for job b: a's GPU
    ids move with it to ids free there, so b still launches at once (kept as planned,
    they collided with b's and b waited for a to end)."""
    kube.put("nodes", node("gpu-2", gpus=4, model="NVIDIA-A100-SXM4-80GB"))
    a = submit_job(owner, project, command="python a.py", gpus=3)
    b = submit_job(owner, project, command="python b.py", gpus=3)
    admission_pass()
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.state == b.state == "admitted"
    b_node = b.placement["hosts"]["0"]
    assert a.placement["hosts"]["0"] != b_node
    assert launch_job(a)
    a.refresh_from_db()
    running = pod_json(a, phase="Running", state={"running": {}}, node_name=b_node)
    kube.script_watch("pods", event("MODIFIED", running, 701))
    pod_watch(kube).watch_once()
    a.refresh_from_db()
    assert a.placement["hosts"] == {"0": b_node} and a.placement["nodes"] == {b_node: 1}
    assert len(a.placement["gpus"]["0"]) == 3
    assert not set(a.placement["gpus"]["0"]) & set(b.placement["gpus"]["0"])
    assert device_holder(b) is None
    assert launch_job(b)


# --- the launch pool -------------------------------------------------------------------


def wait_for(condition, what: str, seconds: float = 20.0) -> None:
    """Wait for a condition another thread brings about (a deadline, not a measurement)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_a_burst_of_admitted_jobs_is_created_concurrently_and_each_attempt_once(kube, owner, project, settings):
    """The launch task hands the API creates to the pool: four attempts' creates are in
    flight at once (the fake holds them), and after the pool is done every attempt's
    Secret and Job were created exactly once and marked created."""
    from jobs.tasks import launch_admitted

    settings.GANTRY_K8S_LAUNCH_CONCURRENCY = 4
    reset_backends()
    jobs = [submit_job(owner, project, command=f"python train.py --n {i}") for i in range(6)]
    admission_pass()
    hold = kube.hold_creates = threading.Event()

    def release_when_four_wait():  # no database here: only the fake's counters
        for _ in range(1000):
            if kube.waiting_creates >= 4:
                break
            hold.wait(0.02)
        hold.set()

    releaser = threading.Thread(target=release_when_four_wait)
    releaser.start()
    assert launch_admitted() == 6
    releaser.join()
    assert kube.most_waiting == 4  # the pool's four threads, each with a create in flight
    for job in jobs:
        job.refresh_from_db()
        name = f"gantry-job-{job.pk}-a1"
        assert job.state == "starting", job.state_reason
        assert [r["name"] for r in kube.made("POST", "jobs")].count(name) == 1
        assert [r["name"] for r in kube.made("POST", "secrets")].count(f"{name}-token") == 1
        owner_ref = kube.get("secrets", "gantry-lab-a", f"{name}-token")["metadata"]["ownerReferences"][0]
        assert owner_ref["uid"] == kube.get("jobs", "gantry-lab-a", name)["metadata"]["uid"]
        assert job.worker_set.get().workdir == f"k8s://fake/gantry-lab-a/{name}"
    assert not get_backend("kubernetes")._inflight


def test_a_create_the_api_refuses_fails_the_attempt_with_its_words_and_leaves_nothing(kube, owner, project):
    kube.refuse_creates["secrets"] = (403, 'secrets is forbidden: User "gantry" cannot create resource "secrets"')
    job = launch(owner, project, max_retries=1)
    assert job.state == "queued"  # retried: the attempt failed
    assert "attempt 1 failed (could not start: cluster fake refused Gantry's credentials (HTTP 403: secrets is forbidden" in job.state_reason
    assert kube.get("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a1") is None  # created, then deleted
    assert [r["name"] for r in kube.made("DELETE", "jobs")] == [f"gantry-job-{job.pk}-a1"]


def test_a_job_the_controller_has_not_synced_does_not_look_up_events(kube, owner, project):
    """A new Job's first watch events come before the Job controller made its pods (no
    startTime yet): no FailedCreate can be there, so no list of events per launch. The
    same while an ended pod is being counted."""
    job = launch(owner, project)
    obj = json.loads(json.dumps(kube.get("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a1")))
    obj.pop("status", None)
    # Nor while the controller counts an ended pod (active 0, not yet succeeded).
    counting = {"startTime": stamp(), "active": 0, "uncountedTerminatedPods": {"succeeded": ["u1"]}}
    kube.script_watch("jobs", event("ADDED", obj, 951), event("MODIFIED", {**obj, "status": {}}, 952),
                      event("MODIFIED", {**obj, "status": counting}, 953))
    job_watch().watch_once()
    assert not kube.made("GET", "events")
    job.refresh_from_db()
    assert job.state == "starting"


def test_cancel_while_the_objects_are_being_created_deletes_them_and_cancels(kube, owner, project):
    job = submit_job(owner, project, command="python train.py")
    admission_pass()
    job.refresh_from_db()
    kube.hold_creates = threading.Event()
    assert launch_job(job)
    wait_for(lambda: kube.waiting_creates == 1, "the Job's create in flight")
    # Reconcile meanwhile: no Job yet, but it is being created, so nothing is lost.
    assert reconcile_job(job) is None
    job.refresh_from_db()
    assert job.state == "starting"
    cancel_job(owner, job)
    kube.hold_creates.set()
    get_backend("kubernetes").finish_launches()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("cancelled", f"cancelled by {owner.username}")
    assert kube.get("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a1") is None


def test_a_starting_attempt_whose_objects_never_came_is_lost_after_the_launch_deadline(kube, owner, project):
    """Another process's pool died before creating it: reconcile waits out the launch
    deadline (the objects may still come), then the attempt is lost and retried."""
    from jobs.compute.kubernetes import backend as kubernetes

    job = launch(owner, project, max_retries=1)
    kube.objects.pop(("jobs", "gantry-lab-a", f"gantry-job-{job.pk}-a1"))
    JobWorker.objects.filter(job=job).update(workdir="")  # never marked created
    assert reconcile_job(job) is None
    long_ago = datetime.now(UTC) - timedelta(seconds=kubernetes.LAUNCH_DEADLINE_SECONDS + 1)
    JobWorker.objects.filter(job=job).update(launched_at=long_ago)
    assert reconcile_job(job) == "lost"
    job.refresh_from_db()
    assert job.state == "queued" and "no longer exists" in job.state_reason


def test_a_kubernetes_launch_never_waits_for_a_device_holder(kube, owner, project):
    """Placements on Kubernetes are counters (the device plugin picks GPUs): a launched
    job with the same planned ids does not hold the next one back."""
    a = launch(owner, project, gpus=1)
    b = submit_job(owner, project, command="python b.py", gpus=1)
    admission_pass()
    b.refresh_from_db()
    Job.objects.filter(pk=b.pk).update(placement=a.placement)
    b.refresh_from_db()
    assert device_holder(b) == a  # the same ids, as the local backend would see them
    assert launch_job(b)
    b.refresh_from_db()
    assert b.state == "starting"
