"""From what Kubernetes says about pods and Jobs to what Gantry's services are told.

The parts:

* `assess_pod(pod)` — a pure reading of a V1Pod: pending (and why), running, or ended
  (and why, in words people understand: an image that cannot be pulled, no node for the
  request, OOMKilled, evicted).
* `observe_pod(job, pod)` / `on_pod_event` / `on_job_event` — report that to
  `jobs.services` the way an executor would: an ended worker through
  `record_worker_status` (or as lost, then `settle_job`), a pending reason as the job's
  reason while it starts. Then whatever belongs to no running attempt is deleted, so a
  failed image pull or a cancelled job leaves nothing running.
* `check_failed_create` — a Job with no pod: the Job controller's `FailedCreate` events
  (ResourceQuota, LimitRange, an admission webhook) through
  `services.report_backend_problem`, so a refused job never stays "starting".

A pod the cluster stops (evicted, drained, preempted: `disrupted`) is a lost worker,
retried while retries remain, whatever its SIGTERMed executor reports.

`ResourceWatch` lists, then watches from the list's resourceVersion, resumes from the
last one it saw, and lists again when the API server answers 410 Gone. `manage.py
k8s_watch` runs one for pods and one for Jobs per cluster; `KubernetesBackend.probe` (in
the reconcile task) calls `observe_pod` too, so a missed event costs a minute at most.

The executor reports "started" itself: a running container is not yet a running command
(inputs are staged first), and a job's timeout counts from the command's start.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from jobs.compute.kubernetes import manifests as m
from jobs.compute.kubernetes.stream import Raw, ResourceWatch  # noqa: F401 (Raw: tests, callers)

logger = logging.getLogger(__name__)

IMAGE_FAILURES = ("ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CREATE_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")


@dataclass(frozen=True)
class PodVerdict:
    """pending | waiting (pending with a reason worth showing) | running | terminating |
    succeeded | failed | lost."""

    status: str
    reason: str = ""
    exit_code: int | None = None

    @property
    def ended(self) -> bool:
        return self.status in ("succeeded", "failed", "lost")


def pod_rank(pod) -> int:
    annotations = pod.metadata.annotations or {}
    labels = pod.metadata.labels or {}
    raw = annotations.get(m.INDEX_ANNOTATION, labels.get(m.LABEL_RANK, "0"))
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 0


def _container(pod):
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == m.CONTAINER:
            return status
    return None


def _memory_limit(pod) -> str:
    for container in pod.spec.containers if pod.spec else []:
        if container.name == m.CONTAINER and container.resources and container.resources.limits:
            return container.resources.limits.get("memory", "")
    return ""


def _image(pod) -> str:
    for container in pod.spec.containers if pod.spec else []:
        if container.name == m.CONTAINER:
            return container.image or ""
    return ""


def _condition(pod, kind: str):
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == kind:
            return cond
    return None


DISRUPTED_REASONS = ("Evicted", "Preempting")


def disrupted(pod) -> str:
    """Why the cluster stopped the pod (evicted, preempted, drained, node pressure), in
    words; "" if it did not."""
    cond = _condition(pod, "DisruptionTarget")
    if cond is not None and cond.status == "True":
        why, detail = cond.reason, cond.message
    elif pod.status and pod.status.reason in DISRUPTED_REASONS:
        why, detail = pod.status.reason, pod.status.message
    else:
        return ""
    return f"stopped by the cluster ({why}: {(detail or 'no detail').strip()[:300]})"


def assess_pod(
    pod, now: datetime | None = None, unschedulable_seconds: int | None = None
) -> PodVerdict:
    """What a pod's status means for its worker, in words for the job page."""
    now = now or timezone.now()
    if unschedulable_seconds is None:
        unschedulable_seconds = settings.GANTRY_K8S_UNSCHEDULABLE_SECONDS
    status = pod.status
    container = _container(pod)
    state = container.state if container else None

    if state and state.terminated and state.terminated.reason == "OOMKilled":
        t = state.terminated
        limit = _memory_limit(pod)
        return PodVerdict(
            "failed",
            f"out of memory: the container went over its memory limit of {limit} "
            f"and was killed (OOMKilled, exit code {t.exit_code})",
            t.exit_code,
        )
    # Evicted (eviction API, node drain, node pressure) or preempted by the cluster: the
    # executor inside saw only a SIGTERM, so whatever it exits with, the worker is lost
    # (retried while retries remain), not failed or cancelled. Not while its container
    # still runs out its grace period: the executor stops the command and uploads its
    # last checkpoint and outputs then, which an attempt already ended would refuse
    # (its own report, "cancelled" with no one having asked, is taken as lost too).
    stopped = disrupted(pod)
    if stopped:
        ending = status is not None and status.phase in ("Failed", "Succeeded")
        if state and state.running and not ending:
            return PodVerdict("terminating", f"{stopped}; its executor is saving its work")
        return PodVerdict("lost", stopped)
    if state and state.terminated:
        t = state.terminated
        if t.exit_code == 0:
            return PodVerdict("succeeded", "exited with code 0", 0)
        detail = f" ({t.message.strip()[:300]})" if t.message and t.message.strip() else ""
        return PodVerdict("failed", f"exited with code {t.exit_code}{detail}", t.exit_code)

    if status and status.phase == "Failed":
        return PodVerdict(
            "lost",
            f"the pod failed ({status.reason or 'no reason'}: {status.message or 'no detail'})",
        )
    if status and status.phase == "Succeeded":
        return PodVerdict("succeeded", "exited with code 0", 0)
    if pod.metadata.deletion_timestamp is not None:
        return PodVerdict("terminating", "the pod is being deleted")

    if state and state.waiting:
        w = state.waiting
        message = (w.message or w.reason or "").strip()[:300]
        if w.reason in IMAGE_FAILURES:
            return PodVerdict("failed", f"the image {_image(pod)} cannot be pulled: {message}")
        if w.reason == "ErrImagePull":
            return PodVerdict(
                "waiting", f"pulling the image {_image(pod)} failed, retrying: {message}"
            )
        if w.reason in CREATE_FAILURES:
            return PodVerdict("failed", f"the container could not be created: {message}")
        if w.reason == "ContainerCreating":
            return PodVerdict("pending", "pulling the image and creating the container")

    scheduled = _condition(pod, "PodScheduled")
    if (
        scheduled is not None
        and scheduled.status == "False"
        and scheduled.reason == "Unschedulable"
    ):
        message = (scheduled.message or "").strip()[:300]
        since = scheduled.last_transition_time
        if since is not None and (now - since).total_seconds() > unschedulable_seconds:
            minutes = max(1, unschedulable_seconds // 60)
            return PodVerdict(
                "failed", f"no node can run it (waited {minutes} min for one): {message}"
            )
        return PodVerdict("waiting", f"waiting for a node: {message}")

    if state and state.running:
        return PodVerdict("running", "")
    return PodVerdict("pending", "waiting for the pod to start")


# --- reporting to the services ----------------------------------------------------------


def vouch(job, rank: int, now: datetime) -> None:
    """The cluster is still scheduling or pulling for this worker: its executor has not
    started, so it cannot heartbeat, but nothing is lost (reconcile's heartbeat timeout
    is for executors, and an image pull can take minutes)."""
    from jobs.services.cluster_reports import keep_alive

    keep_alive(job, rank, now)


def note_reason(job, reason: str) -> None:
    """Show why a starting job has not started yet (once per distinct reason)."""
    from jobs.services.lifecycle import report_backend_problem

    report_backend_problem(job, reason, terminal=False)


def report_ended(job, rank: int, verdict: PodVerdict) -> None:
    """Tell the services a worker ended, as its executor would have (a repeated report,
    after the executor's own, changes nothing)."""
    from jobs.services.cluster_reports import record_worker_lost
    from jobs.services.ingestion import record_worker_status

    who = f"worker {rank}: " if job.workers > 1 else ""
    if verdict.status == "lost":
        record_worker_lost(job, rank, verdict.reason)
        return
    logger.info("job %s %s%s", job.pk, who, verdict.reason)
    record_worker_status(
        job,
        rank,
        {
            "event": "exited",
            "outcome": verdict.status,
            "exit_code": verdict.exit_code,
            "reason": verdict.reason,
        },
    )


def observe_pod(job, pod, *, now=None, backend=None, ref=None) -> PodVerdict:
    """Report what one pod of the job's current attempt says; returns the verdict."""
    from jobs.states import LAUNCHED

    now = now or timezone.now()
    rank = pod_rank(pod)
    verdict = assess_pod(pod, now)
    if job.state not in LAUNCHED:
        return verdict
    if verdict.status in ("pending", "waiting"):
        vouch(job, rank, now)
        if verdict.status == "waiting":
            note_reason(job, verdict.reason)
    elif verdict.ended:
        report_ended(job, rank, verdict)
        if verdict.status != "succeeded" and backend is not None:
            # An image that cannot be pulled or a pod no node takes would sit there.
            name = m.workload_name(job.pk, job_attempt_of(pod, job.attempt))
            backend.delete_workload(ref, pod.metadata.namespace, name, job.kind)
    return verdict


# --- pods the cluster refuses to create ------------------------------------------------

# A LimitRange or an admission webhook refuses the same pod spec every time; a quota
# refusal (or anything else, e.g. a service account not created yet in a new namespace)
# may pass once other pods finish, so the job waits with the reason, as for a node.
PERMANENT_REFUSALS = (
    ("admission webhook", "an admission webhook denied them"),
    ("denied the request", "an admission webhook denied them"),
    ("per Container", "they break the namespace's LimitRange"),
    ("per Pod", "they break the namespace's LimitRange"),
    ("LimitRange", "they break the namespace's LimitRange"),
    ("limit to request ratio", "they break the namespace's LimitRange"),
)


def _event_time(event):
    return event.first_timestamp or event.event_time or event.last_timestamp


def _refusal_message(message: str) -> str:
    message = re.sub(r"^Error creating:\s*", "", (message or "").strip())
    return re.sub(r'^pods? "[^"]*" is forbidden:\s*', "", message)[:300]


def assess_failed_create(
    events, now: datetime | None = None, wait_seconds: int | None = None
) -> PodVerdict | None:
    """What the Job controller's `FailedCreate` events on a Job say: None when there
    are none, "waiting" while a possibly passing refusal (quota) is younger than
    `wait_seconds` (GANTRY_K8S_UNSCHEDULABLE_SECONDS), else "failed"."""
    now = now or timezone.now()
    if wait_seconds is None:
        wait_seconds = settings.GANTRY_K8S_UNSCHEDULABLE_SECONDS
    refused = [e for e in events if e.reason == "FailedCreate"]
    if not refused:
        return None
    latest = max(refused, key=lambda e: e.last_timestamp or e.event_time or now)
    first = min((t for t in map(_event_time, refused) if t is not None), default=now)
    message = _refusal_message(latest.message)
    for needle, words in PERMANENT_REFUSALS:
        if needle in (latest.message or ""):
            return PodVerdict(
                "failed", f"the cluster refused to create its pods: {words} ({message})"
            )
    if "exceeded quota" in message:
        words = "the namespace's ResourceQuota is used up"
    else:
        words = "Kubernetes could not create them"
    if (now - first).total_seconds() > wait_seconds:
        minutes = max(1, wait_seconds // 60)
        return PodVerdict(
            "failed",
            f"the cluster refused to create its pods for {minutes} min: {words} ({message})",
        )
    return PodVerdict(
        "waiting", f"waiting: the cluster refuses to create its pods, {words} ({message})"
    )


def check_failed_create(job, backend, ref, namespace: str, name: str, *, now=None):
    """Look for `FailedCreate` events on the job's Kubernetes Job (it has no pod) and
    report them: the reason while it may pass, else a failed attempt and the Job
    deleted. Returns the verdict (None: no refusal, the pods are just not there yet)."""
    from jobs.services.lifecycle import report_backend_problem

    conn = backend.connection(ref)
    selector = f"involvedObject.kind=Job,involvedObject.name={name},reason=FailedCreate"
    events = conn.core.list_namespaced_event(
        namespace, field_selector=selector, _request_timeout=conn.timeout
    ).items
    verdict = assess_failed_create(events, now)
    if verdict is None:
        return None
    if verdict.status == "waiting":
        for rank in range(job.workers):
            vouch(job, rank, now or timezone.now())
        report_backend_problem(job, verdict.reason, terminal=False)
    else:
        logger.info("job %s: %s", job.pk, verdict.reason)
        report_backend_problem(job, verdict.reason, terminal=True)
        backend.delete_workload(ref, namespace, name, job.kind)
    return verdict


def _stopped_by_cluster(backend, ref, k8s_job, message: str) -> str:
    """Why the cluster stopped a pod of this Kubernetes Job ("" if none was stopped)."""
    conn = backend.connection(ref)
    labels = k8s_job.metadata.labels or {}
    selector = (
        f"{m.LABEL_JOB}={labels.get(m.LABEL_JOB)},{m.LABEL_ATTEMPT}={labels.get(m.LABEL_ATTEMPT)}"
    )
    pods = conn.core.list_namespaced_pod(
        k8s_job.metadata.namespace, label_selector=selector, _request_timeout=conn.timeout
    ).items
    for pod in pods:
        stopped = disrupted(pod)
        if stopped:
            return stopped
    if "DisruptionTarget" in message:  # the pod is gone already; the Job still says so
        return f"stopped by the cluster ({message.strip()[:300]})"
    return ""


def _no_pods(status) -> bool:
    """No pod active, ready, ended or being counted as ended (between a pod's end and
    `succeeded`, the controller lists it in uncountedTerminatedPods with `active` 0)."""
    if not status:
        return True
    uncounted = status.uncounted_terminated_pods
    counting = uncounted is not None and (uncounted.succeeded or uncounted.failed)
    return not (
        status.active
        or status.ready
        or status.succeeded
        or status.failed
        or counting
        or getattr(status, "terminating", None)
    )


def job_attempt_of(obj, default: int) -> int:
    try:
        return int((obj.metadata.labels or {}).get(m.LABEL_ATTEMPT, default))
    except (TypeError, ValueError):
        return default


def _gantry_job(labels: dict):
    from jobs.models import Job

    try:
        job_id = int(labels[m.LABEL_JOB])
        attempt = int(labels[m.LABEL_ATTEMPT])
    except (KeyError, TypeError, ValueError):
        return None, None
    job = Job.objects.filter(pk=job_id).select_related("project__tenant").first()
    return job, attempt


def _record_node(job, pod, backend=None) -> None:
    """Where a worker really runs: the cluster's scheduler has the last word over
    admission's plan (`services.cluster_reports.record_worker_node` corrects it, moving
    the rank's GPU and CPU counters to ids free on its real node)."""
    from jobs.services.cluster_reports import record_worker_node

    node = pod.spec.node_name if pod.spec else None
    if not node:
        return
    rank = pod_rank(pod)
    if (job.placement.get("hosts") or {}).get(str(rank)) == node:
        return
    sizes = {"gpus": 0, "cpus": 0}
    if backend is not None:
        for known in backend.nodes():
            if known.name == node:
                sizes = {"gpus": int(known.gpus), "cpus": int(known.cpus)}
    record_worker_node(job, rank, node, sizes)


def on_pod_event(backend, ref, event_type: str, pod) -> str:
    """One pod from a list or a watch event. Returns what was done (for logs and tests)."""
    from jobs.states import LAUNCHED

    job, attempt = _gantry_job(pod.metadata.labels or {})
    if job is None and attempt is None:
        return "ignored"
    live = job is not None and job.state in LAUNCHED and job.attempt == attempt
    if not live:
        phase = pod.status.phase if pod.status else None
        if (
            event_type != "DELETED"
            and phase in ("Pending", "Running")
            and not pod.metadata.deletion_timestamp
        ):
            kind = (pod.metadata.labels or {}).get(m.LABEL_KIND, "train")
            name = m.workload_name(int(pod.metadata.labels[m.LABEL_JOB]), attempt)
            backend.delete_workload(ref, pod.metadata.namespace, name, kind)
            return "deleted orphan"
        return "ignored"
    if event_type == "DELETED":
        verdict = assess_pod(pod)
        if verdict.ended:
            report_ended(job, pod_rank(pod), verdict)
            return verdict.status
        # Gone without a word from its executor (deleted by hand, node lost): the
        # services' reconcile asks probe(), which finds it missing and marks it lost.
        from jobs.services.lifecycle import reconcile_job

        reconcile_job(job)
        return "reconciled"
    _record_node(job, pod, backend)
    return observe_pod(job, pod, backend=backend, ref=ref).status


def on_job_event(backend, ref, event_type: str, k8s_job) -> str:
    """A Kubernetes Job: its pods say more, but a Job that failed before any pod could
    say so (deadline exceeded, pods refused by the namespace's quota) is reported here,
    and a Job still active for an attempt that is over is deleted."""
    from jobs.models import JobWorker
    from jobs.states import LAUNCHED

    job, attempt = _gantry_job(k8s_job.metadata.labels or {})
    if (job is None and attempt is None) or event_type == "DELETED":
        return "ignored"
    status = k8s_job.status
    live = job is not None and job.state in LAUNCHED and job.attempt == attempt
    if not live:
        if status and status.active:
            backend.delete_workload(ref, k8s_job.metadata.namespace, k8s_job.metadata.name, "train")
            return "deleted orphan"
        return "ignored"
    for cond in (status.conditions or []) if status else []:
        if cond.type == "Failed" and cond.status == "True":
            reason = f"Kubernetes failed the job ({cond.reason}: {cond.message or 'no detail'})"
            verdict = PodVerdict("failed", reason)
            if cond.reason == "PodFailurePolicy":
                # The podFailurePolicy fails the Job on a disruption too, and an evicted
                # pod's SIGTERMed executor exits non-zero (matching the exit-code rule
                # first): the pods say whether the cluster stopped them.
                stopped = _stopped_by_cluster(backend, ref, k8s_job, cond.message or "")
                if stopped:
                    verdict = PodVerdict("lost", stopped)
            pending = JobWorker.objects.filter(job=job).exclude(
                state__in=("succeeded", "failed", "cancelled", "timed_out", "lost")
            )
            for worker in pending:
                report_ended(job, worker.rank, verdict)
                job.refresh_from_db()
            return verdict.status
    if _no_pods(status) and status and status.start_time and k8s_job.metadata.name:
        # No pod after the Job controller's first sync (it sets startTime, and `active`
        # with the pods it made): perhaps the namespace's quota, LimitRange or a webhook
        # refuses them. Not before it: every new Job would cost a list of events.
        verdict = check_failed_create(
            job, backend, ref, k8s_job.metadata.namespace, k8s_job.metadata.name
        )
        if verdict is not None:
            return "refused" if verdict.status == "failed" else "waiting"
    return "ok"


# --- list, then watch ---------------------------------------------------------------------


def watches_for(backend, ref) -> list[ResourceWatch]:
    """The pod and Job watches of one cluster: every namespace, Gantry's objects only
    (one watch per kind, not per tenant namespace; see platform/k8s/rbac.yaml)."""
    conn = backend.connection(ref)
    managed = ",".join(f"{k}={v}" for k, v in m.MANAGED_BY.items())
    return [
        ResourceWatch(
            conn.core.list_pod_for_all_namespaces,
            lambda t, obj: on_pod_event(backend, ref, t, obj),
            label_selector=managed,
        ),
        ResourceWatch(
            conn.batch.list_job_for_all_namespaces,
            lambda t, obj: on_job_event(backend, ref, t, obj),
            label_selector=managed,
        ),
    ]
