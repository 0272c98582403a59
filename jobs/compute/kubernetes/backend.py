"""The Kubernetes backend: each attempt of a job is a batch/v1 Job (or, for a notebook,
a Pod) in its tenant's namespace, built by `jobs.compute.kubernetes.manifests`.

Like every backend it never changes a job's state: the executor inside the pod reports
to Gantry's API as it does on the local backend, and what only the cluster knows (an
image that cannot be pulled, no node for the request, OOMKilled, a pod deleted or
evicted) is reported to `jobs.services` by `jobs.compute.kubernetes.watch` — fast from the
watches of `manage.py k8s_watch`, and at the latest from `probe()` in the reconcile task.

Clusters come from `core.registry.kubernetes_clusters` (the rows of cluster.KubernetesCluster:
jobs never imports cluster; the default one runs new jobs); with none registered, from
$KUBECONFIG or the in-cluster service account (`jobs.compute.kubernetes.client`: reaching a
cluster and the one-object API calls).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.utils import timezone

from core import registry
from jobs.compute.base import Backend, Capacity, Gpu, WorkerProbe
from jobs.compute.kubernetes import manifests as m
from jobs.compute.kubernetes.client import (
    ClusterError,
    ClusterRef,
    Connection,
    await_quota,
    create_object,
    delete_created,
    describe_error,
    node_resources,
    registered_clusters,
)

logger = logging.getLogger(__name__)

CAPACITY_CACHE_SECONDS = 30
# A tenant's namespace, quota, limits and policies are applied again while unchanged at
# most this often (a burst of launches would otherwise send 5-6 writes each). A failed
# launch forgets them, so a namespace deleted behind Gantry's back is set up again at
# once; with a minute, a loaded API server (about 1 s a write) kept the launch task
# re-applying 15 tenants' objects all the time (the scale benchmark: 1 launch/s).
TENANT_APPLY_SECONDS = 3600
# Within this many seconds of the last check a launch does not even recompute the
# tenant's manifests (its quota comes from the scheduling app: a query and a digest per
# launch were a fifth of a launch's time in a burst); a changed quota applies after it.
TENANT_CHECK_SECONDS = 5
# Launches handed to the pool and not yet created, per launch thread, before `launch()`
# waits for room (a burst of thousands must not hold thousands of manifests).
LAUNCH_BACKLOG_PER_THREAD = 8
# A starting attempt whose objects are neither there nor known to be created yet (another
# process's pool may still be creating them) is given this long before it counts as lost.
LAUNCH_DEADLINE_SECONDS = 300
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


# --- the job's side ----------------------------------------------------------------------


def image_of(job) -> str:
    ref = getattr(job, "image_reference", "")
    if callable(ref):
        ref = ref()
    return str(ref or "")


def spec_from_job(job) -> m.JobSpec:
    model = getattr(job, "gpu_model", "")
    return m.JobSpec(
        id=job.pk,
        attempt=job.attempt,
        kind=job.kind,
        tenant_slug=job.project.tenant.slug,
        name=job.name,
        image=image_of(job),
        gpus=job.gpus,
        cpus=job.cpus,
        memory_mb=job.memory_mb,
        workers=job.workers,
        max_retries=job.max_retries,
        timeout_seconds=job.timeout_seconds,
        gpu_model=model() if callable(model) else str(model or ""),
    )


def manifest_config(ref: ClusterRef) -> m.ManifestConfig:
    return m.ManifestConfig(
        api_url=settings.GANTRY_K8S_API_URL,
        default_image=settings.GANTRY_K8S_DEFAULT_IMAGE,
        namespace_prefix=ref.namespace_prefix,
        platform_namespace=settings.GANTRY_K8S_PLATFORM_NAMESPACE,
        gpu_node_selectors=dict(settings.GANTRY_K8S_GPU_NODE_SELECTORS),
        gpu_tolerations=tuple(settings.GANTRY_K8S_GPU_TOLERATIONS),
        image_pull_secrets=tuple(settings.GANTRY_K8S_IMAGE_PULL_SECRETS),
        ttl_seconds_after_finished=settings.GANTRY_K8S_TTL_SECONDS_AFTER_FINISHED,
        master_port=settings.GANTRY_K8S_MASTER_PORT,
        notebook_port=settings.GANTRY_K8S_NOTEBOOK_PORT,
        host_network=settings.GANTRY_K8S_HOST_NETWORK,
        pod_security=settings.GANTRY_K8S_POD_SECURITY,
        grace_seconds=settings.GANTRY_JOB_GRACE_SECONDS,
        final_flush_seconds=settings.GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS,
        gpu_sample_seconds=settings.GANTRY_GPU_SAMPLE_SECONDS,
    )


def quota_spec(tenant) -> m.QuotaSpec | None:
    """The tenant's limits as scheduling answers them (core.registry.tenant_limits)."""
    limits = registry.tenant_limits(tenant)
    if limits is None:
        return None
    return m.QuotaSpec(gpus=limits["gpus"], cpus=limits["cpus"], memory_mb=limits["memory_mb"])


class KubernetesBackend(Backend):
    name = "kubernetes"
    where = "on the Kubernetes cluster"
    # GPU indices in a placement are counters: the device plugin picks the devices, so a
    # launch never waits for another job to free "its" GPUs (the scheduler waits for room).
    assigns_devices = False

    def __init__(self):
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        self._capacity: tuple[float, Capacity, list] | None = None
        # Cluster name -> the last error talking to it (shown on the cluster page).
        self.errors: dict[str, str] = {}
        # (cluster, namespace) -> (the tenant manifests last applied, when): a launch
        # re-applies them only when they changed or TENANT_APPLY_SECONDS passed.
        self._tenants: dict[tuple[str, str], tuple[str, float]] = {}
        # (cluster, tenant id) -> (namespace, when its manifests were last checked).
        self._tenants_checked: dict[tuple[str, int], tuple[str, float]] = {}
        # The launch pool: API creates of admitted attempts, reported by finish_launches.
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._inflight: dict[tuple[int, int], tuple] = {}
        self._slots = threading.BoundedSemaphore(
            max(1, settings.GANTRY_K8S_LAUNCH_CONCURRENCY) * LAUNCH_BACKLOG_PER_THREAD
        )

    # -- clusters --------------------------------------------------------------------
    def default_cluster(self) -> ClusterRef:
        return registered_clusters()[0]

    def connection(self, ref: ClusterRef | None = None) -> Connection:
        ref = ref or self.default_cluster()
        with self._lock:
            conn = self._connections.get(ref.name)
            if conn is None or conn.ref != ref:
                conn = self._connections[ref.name] = Connection(ref)
            return conn

    def cluster_of(self, job) -> ClusterRef:
        name = (job.placement or {}).get("cluster")
        for ref in registered_clusters():
            if ref.name == name:
                return ref
        return self.default_cluster()

    # -- capacity --------------------------------------------------------------------
    def node_details(self, ref: ClusterRef | None = None) -> list[dict]:
        ref = ref or self.default_cluster()
        try:
            conn = self.connection(ref)
            nodes = conn.core.list_node(_request_timeout=conn.timeout).items
        except Exception as exc:
            self.errors[ref.name] = describe_error(exc, ref.name)
            raise ClusterError(self.errors[ref.name]) from exc
        self.errors.pop(ref.name, None)
        return [node_resources(n) for n in nodes]

    def _snapshot(self) -> tuple[Capacity, list]:
        now = time.monotonic()
        if self._capacity and now - self._capacity[0] < CAPACITY_CACHE_SECONDS:
            return self._capacity[1], self._capacity[2]
        try:
            details = [d for d in self.node_details() if d["schedulable"]]
        except ClusterError:
            logger.warning("Kubernetes capacity unknown: %s", self.errors)
            if self._capacity:  # the last known state beats "nothing"
                return self._capacity[1], self._capacity[2]
            return Capacity(cpus=0, memory_mb=0), []
        gpus: list[Gpu] = []
        for d in details:
            for _ in range(d["allocatable"]["gpus"]):
                gpus.append(Gpu(index=len(gpus), name=d["gpu_model"]))
        capacity = Capacity(
            cpus=int(sum(d["allocatable"]["cpus"] for d in details)),
            memory_mb=sum(d["allocatable"]["memory_mb"] for d in details),
            gpus=tuple(gpus),
        )
        self._capacity = (now, capacity, details)
        return capacity, details

    def capacity(self) -> Capacity:
        """Allocatable resources of the default cluster's ready, schedulable nodes.

        GPU indices are cluster-wide counters, not devices: the device plugin picks the
        devices on the node; admission only needs the count."""
        return self._snapshot()[0]

    def nodes(self):
        from jobs.compute.base import Node

        return [
            Node(
                name=d["name"],
                gpus=d["allocatable"]["gpus"],
                cpus=d["allocatable"]["cpus"],
                memory_mb=d["allocatable"]["memory_mb"],
                gpu_model=d["gpu_model"],
            )
            for d in self._snapshot()[1]
        ]

    # -- what the executor runs -----------------------------------------------------
    def command(self, job, worker) -> list[str]:
        if job.kind == "notebook":
            return self.notebook_command(job, worker)
        argv = shlex.split(job.command)
        for name, value in sorted(job.parameters.items()):
            if isinstance(value, bool):
                value = "true" if value else "false"
            argv += [f"--{name}", str(value)]
        return argv

    def notebook_command(self, job, worker) -> list[str]:
        return [
            "python",
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=0.0.0.0",
            f"--ServerApp.port={settings.GANTRY_K8S_NOTEBOOK_PORT}",
            f"--ServerApp.base_url=/jobs/{job.pk}/lab/",
            "--ServerApp.root_dir=.",
            "--ServerApp.allow_remote_access=True",
            "--allow-root",
            # Never sign a notebook trusted: one user's saved output must not run as
            # script in another's browser (executor/notebook_trust.py, as on the local backend).
            "--NotebookNotary.db_file=:memory:",
            "--ContentsManager.pre_save_hook=executor.notebook_trust.never_trusted",
        ]

    def environment(self, job, worker) -> dict[str, str]:
        """The spec's env: the job's variables and parameters. GPUs come from the device
        plugin and torchrun's contract from the pod (PET_NODE_RANK needs the pod's index),
        so neither is set here: the spec's env would override the pod's."""
        env = {str(k): str(v) for k, v in job.env.items()}
        for name, value in job.parameters.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            env["GANTRY_PARAM_" + name.upper().replace("-", "_")] = str(value)
        for var in THREAD_VARS:
            env.setdefault(var, str(job.cpus))
        if job.kind == "notebook":
            env["JUPYTER_TOKEN"] = worker.notebook_token
        return env

    # -- launching -------------------------------------------------------------------
    def ensure_tenant(self, conn: Connection, tenant) -> str:
        """Create or update the tenant's namespace, quota, limits and notebook policy."""
        from kubernetes.client.exceptions import ApiException

        checked = self._tenants_checked.get((conn.ref.name, tenant.pk))
        if checked is not None and time.monotonic() - checked[1] < TENANT_CHECK_SECONDS:
            return checked[0]
        cfg = manifest_config(conn.ref)
        manifests = m.tenant_manifests(tenant.slug, quota_spec(tenant), cfg)
        key = (conn.ref.name, manifests[0]["metadata"]["name"])
        digest = json.dumps(manifests, sort_keys=True)
        applied = self._tenants.get(key)
        if (
            applied is not None
            and applied[0] == digest
            and time.monotonic() - applied[1] < TENANT_APPLY_SECONDS
        ):
            self._tenants_checked[(conn.ref.name, tenant.pk)] = (key[1], time.monotonic())
            return key[1]
        for manifest in manifests:
            kind, meta = manifest["kind"], manifest["metadata"]
            create, replace = {
                "Namespace": (
                    lambda b: conn.core.create_namespace(b, _request_timeout=conn.timeout),
                    # An existing namespace gets today's labels (Pod Security among them).
                    lambda b: conn.core.patch_namespace(
                        b["metadata"]["name"],
                        {"metadata": {"labels": b["metadata"]["labels"]}},
                        _request_timeout=conn.timeout,
                    ),
                ),
                "ResourceQuota": (
                    lambda b: conn.core.create_namespaced_resource_quota(
                        b["metadata"]["namespace"], b, _request_timeout=conn.timeout
                    ),
                    lambda b: conn.core.replace_namespaced_resource_quota(
                        b["metadata"]["name"],
                        b["metadata"]["namespace"],
                        b,
                        _request_timeout=conn.timeout,
                    ),
                ),
                "LimitRange": (
                    lambda b: conn.core.create_namespaced_limit_range(
                        b["metadata"]["namespace"], b, _request_timeout=conn.timeout
                    ),
                    lambda b: conn.core.replace_namespaced_limit_range(
                        b["metadata"]["name"],
                        b["metadata"]["namespace"],
                        b,
                        _request_timeout=conn.timeout,
                    ),
                ),
                "NetworkPolicy": (
                    lambda b: conn.networking.create_namespaced_network_policy(
                        b["metadata"]["namespace"], b, _request_timeout=conn.timeout
                    ),
                    lambda b: conn.networking.replace_namespaced_network_policy(
                        b["metadata"]["name"],
                        b["metadata"]["namespace"],
                        b,
                        _request_timeout=conn.timeout,
                    ),
                ),
            }[kind]
            try:
                create(manifest)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                if replace is not None:
                    replace(manifest)
            logger.debug("applied %s %s", kind, meta["name"])
            if kind == "ResourceQuota":
                await_quota(conn, manifest)
        self._tenants[key] = (digest, time.monotonic())
        self._tenants_checked[(conn.ref.name, tenant.pk)] = (key[1], time.monotonic())
        return key[1]

    def launch(self, job, token_for_rank) -> None:
        """Write down where the attempt goes, hand its API creates to the launch pool
        (GANTRY_K8S_LAUNCH_CONCURRENCY at a time) and return; `finish_launches()` reports
        them. What fails before the hand-over (no cluster, no namespace) raises here."""
        from jobs.services.cluster_reports import record_attempt_target

        self.finish_launches(wait=False)
        ref = self.default_cluster()
        try:
            conn = self.connection(ref)
            spec = spec_from_job(job)
            cfg = manifest_config(ref)
            namespace = self.ensure_tenant(conn, job.project.tenant)
            tokens = {rank: token_for_rank(rank) for rank in range(job.workers)}
            name = m.object_name(spec)
            workers = {}
            if job.kind == "notebook":
                workers = {
                    rank: {
                        "host": f"{name}.{namespace}.svc",
                        "port": cfg.notebook_port,
                        "notebook_token": secrets.token_urlsafe(24),
                    }
                    for rank in range(job.workers)
                }
            record_attempt_target(
                job, {"cluster": ref.name, "namespace": namespace, "object": name}, workers
            )
            manifests = m.job_manifests(spec, cfg, tokens)
        except Exception as exc:
            self._tenants.clear()  # perhaps the namespace went: set it up again next time
            self._tenants_checked.clear()
            raise ClusterError(describe_error(exc, ref.name)) from exc
        self._slots.acquire()  # at most so many attempts waiting for the pool
        key = (job.pk, job.attempt)
        try:
            future = self._launch_pool().submit(self._create_attempt, ref, manifests)
        except BaseException:
            self._slots.release()
            raise
        with self._lock:
            self._inflight[key] = (job, ref, namespace, name, future)

    def _launch_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=max(1, settings.GANTRY_K8S_LAUNCH_CONCURRENCY),
                    thread_name_prefix="k8s-launch",
                )
            return self._pool

    def _thread_connection(self, ref: ClusterRef) -> Connection:
        """A launch thread's own API client (urllib3 pools and the client's state stay
        per thread)."""
        conns = self._local.__dict__.setdefault("connections", {})
        conn = conns.get(ref.name)
        if conn is None or conn.ref != ref:
            conn = conns[ref.name] = Connection(ref)
        return conn

    def _create_attempt(self, ref: ClusterRef, manifests: list[dict]) -> None:
        """In a launch thread: the API only, never the database (the launching thread
        owns the job's rows and reports the outcome). The workload first, then what it
        owns with the owner reference in its body: one request per object (a patch each
        afterwards made a train job three). Its pods may want the token Secret a moment
        before it exists: the kubelet retries the mount. A failure deletes what was made."""
        try:
            conn = self._thread_connection(ref)
            workload, created = manifests[-1], []
            try:
                uid = create_object(conn, workload)
                created.append(workload)
                name = workload["metadata"]["name"]
                owner = m.owner_reference(workload["kind"], workload["apiVersion"], name, uid)
                for manifest in manifests[:-1]:
                    owned = m.owned_by(manifest, owner)
                    create_object(conn, owned)
                    created.append(owned)
            except Exception:
                for manifest in reversed(created):
                    with contextlib.suppress(Exception):
                        delete_created(conn, manifest)
                raise
        finally:
            self._slots.release()

    def finish_launches(self, wait: bool = True) -> int:
        """Report the launches the pool has finished (all with `wait`): a failed create
        fails the attempt (API's words; retried while retries remain), one cancelled or
        preempted meanwhile has its objects deleted. Returns how many were reported."""
        from jobs.services.cluster_reports import attempt_statuses, record_attempt_created
        from jobs.services.lifecycle import report_backend_problem

        with self._lock:
            items = list(self._inflight.items())
        items = [(key, item) for key, item in items if wait or item[4].done()]
        for _, item in items:  # every create over, then one query for their attempts' states
            item[4].exception()
        statuses = attempt_statuses([key for key, _ in items]) if items else {}
        reported = 0
        for key, (job, ref, namespace, name, future) in items:
            try:
                future.result()
                error = None
            except Exception as exc:
                error = exc
            with self._lock:
                self._inflight.pop(key, None)
            reported += 1
            status = statuses[key]
            if error is not None:
                logger.warning("could not launch job %s: %s", job.pk, error)
                self._tenants.clear()  # perhaps the namespace went: set it up again
                self._tenants_checked.clear()
                if status != "over":
                    report_backend_problem(
                        job, f"could not start: {describe_error(error, ref.name)}", terminal=True
                    )
            elif status != "current":
                # Cancelled, preempted or ended while the pool created it: the stop's
                # own delete may have come first and found nothing.
                with contextlib.suppress(Exception):
                    self.delete_workload(ref, namespace, name, job.kind)
                if status == "stopping":  # nothing runs: the cancel or preemption is done
                    report_backend_problem(job, "stopped before its pods started", terminal=True)
            else:
                record_attempt_created(job, key[1], f"k8s://{ref.name}/{namespace}/{name}")
        return reported

    def launching(self, job) -> bool:
        """Is the job's current attempt still in this process's launch pool?"""
        with self._lock:
            return (job.pk, job.attempt) in self._inflight

    # -- stopping --------------------------------------------------------------------
    def attempt_objects(self, job, attempt: int | None = None) -> tuple[ClusterRef, str, str]:
        """(cluster, namespace, workload name) of the job's current (or a given) attempt."""
        ref = self.cluster_of(job)
        namespace = (job.placement or {}).get("namespace") or m.namespace_name(
            job.project.tenant.slug, ref.namespace_prefix
        )
        return ref, namespace, m.workload_name(job.pk, attempt or job.attempt)

    def delete_workload(
        self, ref: ClusterRef, namespace: str, name: str, kind: str, grace: int | None = None
    ) -> bool:
        """Delete a job's Job (its pods first: foreground propagation) or notebook Pod.
        True if something was deleted; a missing object is not an error."""
        from kubernetes.client.exceptions import ApiException

        conn = self.connection(ref)
        options = {"propagation_policy": "Foreground", "_request_timeout": conn.timeout}
        if grace is not None:
            options["grace_period_seconds"] = grace
        try:
            if kind == "notebook":
                conn.core.delete_namespaced_pod(name, namespace, **options)
            else:
                conn.batch.delete_namespaced_job(name, namespace, **options)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _stop(self, job, grace: int | None) -> None:
        ref, namespace, name = self.attempt_objects(job)
        try:
            self.delete_workload(ref, namespace, name, job.kind, grace)
        except Exception as exc:
            # The watcher deletes what belongs to no running attempt when the cluster
            # answers again, so nothing is left running for long.
            logger.warning(
                "could not delete %s/%s: %s", namespace, name, describe_error(exc, ref.name)
            )

    def cancel(self, job, ranks=None) -> None:
        # Pods of one attempt live and die together: a gang cannot lose some members.
        self._stop(job, grace=None)

    def kill(self, job, ranks=None) -> None:
        self._stop(job, grace=0)

    # -- looking ---------------------------------------------------------------------
    def probe(self, job) -> list[WorkerProbe]:
        """What the cluster says of each worker; reports pod-level failures on the way
        (see k8s_watch.observe_pod), so reconcile catches them even without the watcher."""
        from kubernetes.client.exceptions import ApiException

        from jobs.compute.kubernetes import watch as k8s_watch

        ref, namespace, name = self.attempt_objects(job)
        conn = self.connection(ref)
        selector = ",".join(f"{k}={v}" for k, v in m.selector(spec_from_job(job)).items())
        pods = conn.core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=conn.timeout
        ).items
        by_rank = {k8s_watch.pod_rank(p): p for p in pods}
        now = timezone.now()
        probes = []
        workload_exists = None
        refused = None
        for worker in job.worker_set.all():
            pod = by_rank.get(worker.rank)
            if pod is None:
                if workload_exists is None:
                    try:
                        if job.kind == "notebook":
                            conn.core.read_namespaced_pod(
                                name, namespace, _request_timeout=conn.timeout
                            )
                        else:
                            conn.batch.read_namespaced_job(
                                name, namespace, _request_timeout=conn.timeout
                            )
                        workload_exists = True
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
                        workload_exists = False
                if workload_exists and job.kind != "notebook" and refused is None:
                    # Quota, LimitRange or a webhook refusing its pods: never "starting"
                    # forever (the Job controller's FailedCreate events say why).
                    refused = k8s_watch.check_failed_create(
                        job, self, ref, namespace, name, now=now
                    ) or k8s_watch.PodVerdict("pending", "pod not created yet")
                created = worker.workdir == f"k8s://{ref.name}/{namespace}/{name}"
                if not workload_exists and not created and self._may_be_creating(job, worker, now):
                    # Still in a launch pool (this process's or another's): not lost yet.
                    k8s_watch.vouch(job, worker.rank, now)
                    probes.append(
                        WorkerProbe(worker.rank, alive=True, detail="its objects are being created")
                    )
                elif workload_exists:
                    if refused is None or refused.status != "failed":
                        k8s_watch.vouch(job, worker.rank, now)
                    detail = refused.reason if refused is not None else "pod not created yet"
                    probes.append(WorkerProbe(worker.rank, alive=True, detail=detail))
                else:
                    probes.append(
                        WorkerProbe(
                            worker.rank,
                            alive=False,
                            detail=f"its Kubernetes {'Pod' if job.kind == 'notebook' else 'Job'} "
                            f"{namespace}/{name} no longer exists",
                        )
                    )
                continue
            verdict = k8s_watch.observe_pod(job, pod, now=now, backend=self, ref=ref)
            probes.append(WorkerProbe(worker.rank, alive=True, detail=verdict.reason))
        return probes

    def _may_be_creating(self, job, worker, now) -> bool:
        if self.launching(job):
            return True
        since = worker.launched_at
        return since is not None and (now - since).total_seconds() < LAUNCH_DEADLINE_SECONDS
