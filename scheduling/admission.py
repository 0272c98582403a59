"""Admission: which queued jobs start now, decided by the scheduling policy.

Each pass reads the cluster once into a `scheduling.policy.data.Snapshot`, calls
`scheduling.policy.schedule_pass.schedule` (the same pure function `manage.py simulate`
replays traces through) and maps its Decision back onto the database:

* **admitted** jobs move to `admitted` with `placement["nodes"]` (node name -> workers)
  from the policy and, per worker rank, the node it runs on and concrete, exclusive GPU
  indices and CPU slots (`placement["hosts" | "gpus" | "cpus"][rank]`; the local backend
  turns them into CUDA_VISIBLE_DEVICES and CPU affinity);
* **preempted** jobs are asked to stop (`services.preempt_job`: SIGTERM, the grace period,
  then back to the queue with their submit order and priority, never to `failed`). The job
  admitted in their place keeps their GPUs reserved and is launched only once they have
  stopped (`services.launch_job` waits while a launched job holds the same devices);
* **waiting** jobs get the policy's reason in plain words, their position in the queue
  and, where the policy can tell, an estimated start.

What the snapshot holds:

* nodes: `backend.nodes()`;
* quotas: `scheduling.TenantQuota`, keyed by tenant slug. A tenant without a row is *best
  effort*: nothing guaranteed, it may borrow up to the whole cluster while it is idle, and
  every job of it runs on borrowed capacity (so a tenant within its guarantee reclaims it).
  GPU limits at or above the cluster's size are passed as unbounded (see `quota_for`);
* running: admitted, starting and running jobs, except those already asked to stop for a
  preemption (their resources are promised to the job that preempted them); and, per
  tenant, what its services hold (model endpoints' running replicas,
  `core.registry.service_holdings`) as one entry that counts in the tenant's quota (and,
  on the local backend, the machine's capacity: the replicas run there) and is never
  preempted (`services_entry`);
* pending: queued jobs with priority, submit time (`created_at`: a requeued or retried
  job keeps its place), gang size, per-worker resources and an estimated duration (the
  job's timeout if it has one, else none: such jobs are not backfilled past a reservation);
* fair-share history (`fair_share_history`, one query): per tenant, the GPU-seconds its jobs
  finished within three decay windows received, and the GPU-seconds it was entitled to
  (its weighted max-min share of the demand while its jobs waited or ran), each second
  decayed by exp(-age / window).

Queued jobs are read as the few columns a pass needs (`QueuedJob`), and waiting jobs'
reasons, positions and estimates are written only where they changed, in one statement: a
pass over a long queue that barely changed costs little. Passes are serialized
(`_serialize_passes`). Per-project quotas are not implemented.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Tenant
from checkpoints.services import work_lost
from jobs.compute import get_backend
from jobs.models import Job, JobScheduling
from jobs.services.holdings import service_holdings
from jobs.states import ACTIVE, TERMINAL, JobState, transition
from scheduling.models import TenantQuota
from scheduling.policy.data import JobRequest, Node, PolicyConfig, Quota, RunningJob, Snapshot
from scheduling.policy.entitlement import entitled_history
from scheduling.policy.schedule_pass import schedule

ADMISSION_LOCK = 0x6A6F6273  # "jobs"
# The live pass keeps immediate reclaim: the preemption guards the simulator measures with
# (PolicyConfig's minimum runtime and reclaim_* settings) are off here, so a tenant within its
# guarantee gets borrowed GPUs back at once, as the docs and tests/jobs/test_scheduling.py
# promise. Turning them on live is a product decision (bench/results/scheduler.json has both).
POLICY = PolicyConfig(
    min_runtime_before_preempt_s=0.0,
    reclaim_after_wait_s=0.0,
    reclaim_work_ratio=math.inf,
    reclaim_min_remaining_s=0.0,
    checkpoint_aware=True,  # victims losing the least since their last checkpoint first
)
NEVER = "it can never run as submitted"
UNBOUNDED = 1 << 20  # GPUs: more than any cluster has


# --- reading the cluster ------------------------------------------------------------------


def policy_nodes(backend) -> list[Node]:
    """The backend's nodes as the policy's (the same fields; jobs never imports scheduling)."""
    return [Node(n.name, n.gpus, n.cpus, n.memory_mb, n.gpu_model) for n in backend.nodes()]


def tenant_key(tenant) -> str:
    return tenant.slug


def quota_for(key: str, row, cluster_gpus: int) -> Quota:
    """The policy's quota for a tenant (by `tenant_key`); `row` is its TenantQuota or None
    (best effort).

    A GPU limit at or above the cluster's size (best effort: the whole cluster) can never
    bind before capacity does, so it is passed as unbounded: the policy checks quotas
    before capacity, and would otherwise say such a job waits for its tenant's quota and
    give it no reservation, letting smaller jobs overtake it forever.
    """
    if row is None:
        return Quota(key, guaranteed_gpus=0, borrow_limit_gpus=UNBOUNDED)
    borrow = row.borrow_limit_gpus
    if row.guaranteed_gpus + borrow >= cluster_gpus:
        borrow = UNBOUNDED
    return Quota(
        key,
        guaranteed_gpus=row.guaranteed_gpus,
        borrow_limit_gpus=borrow,
        max_cpus=row.max_cpus,
        max_memory_mb=row.max_memory_mb,
        max_jobs=row.max_jobs,
        weight=row.weight,
    )


def quotas_for(tenants, cluster_gpus: int) -> dict[str, Quota]:
    return quotas_by_id({t.pk: tenant_key(t) for t in tenants}, cluster_gpus)


def quotas_by_id(keys_by_id: dict[int, str], cluster_gpus: int) -> dict[str, Quota]:
    """Quotas for tenants given as id -> `tenant_key`."""
    # All rows (one per tenant at most): a long list of ids cost more than the rows.
    rows = {q.tenant_id: q for q in TenantQuota.objects.all()}
    return {key: quota_for(key, rows.get(pk), cluster_gpus) for pk, key in keys_by_id.items()}


class QueuedJob(NamedTuple):
    """What a pass reads of each queued job. A long queue read as full rows (JSON columns
    and all) cost several times the scheduling itself; the jobs admitted are read in full."""

    pk: int
    tenant_slug: str  # tenant_key: the policy's tenant (Job.tenant is the row)
    tenant_id: int
    priority: int
    created_at: datetime
    workers: int
    gpus: int
    cpus: int
    memory_mb: int
    timeout_seconds: int | None
    state_reason: str
    queue_position: int | None
    estimated_start_at: datetime | None


QUEUED_COLUMNS = (
    "pk",
    "project__tenant__slug",
    "project__tenant_id",
    *QueuedJob._fields[3:-2],
    "scheduling__queue_position",
    "scheduling__estimated_start_at",
)


# A waiting job's new reason, position and estimated start.
Explained = tuple[QueuedJob, str, int | None, datetime | None]


def queued_jobs(backend_name: str) -> list[QueuedJob]:
    rows = (
        Job.objects.filter(state=JobState.QUEUED, backend=backend_name)
        .order_by("-priority", "created_at", "pk")
        .values_list(*QUEUED_COLUMNS)
    )
    return [QueuedJob._make(row) for row in rows]


def job_request(job: Job | QueuedJob, tenant: str) -> JobRequest:
    return JobRequest(
        id=str(job.pk),
        tenant=tenant,
        priority=job.priority,
        submit_time=job.created_at.timestamp(),
        workers=job.workers,
        gpus_per_worker=job.gpus,
        cpus_per_worker=float(job.cpus),
        memory_mb_per_worker=job.memory_mb,
        estimated_duration=float(job.timeout_seconds) if job.timeout_seconds else None,
    )


def node_placement(job: Job, nodes: list[Node]) -> dict[str, int]:
    """Where a running job's workers are, as node name -> count (the policy's placement)."""
    names = {n.name for n in nodes}
    known = {
        name: int(count)
        for name, count in (job.placement.get("nodes") or {}).items()
        if name in names
    }
    if not known and len(nodes) == 1:
        # Admitted before placements named nodes, or the machine was renamed.
        known = {nodes[0].name: job.workers}
    return known


class FinishedJob(NamedTuple):
    """What fair share reads of a GPU job that ran and finished (`finished_gpu_jobs`)."""

    tenant_id: int
    tenant_slug: str  # tenant_key
    gpus: int  # all workers'
    created_at: datetime
    started_at: datetime
    finished_at: datetime


def finished_gpu_jobs(now: datetime, window_s: float) -> list[FinishedJob]:
    """GPU jobs of every tenant that ran and finished within three decay windows."""
    rows = Job.objects.filter(
        state__in=TERMINAL,
        finished_at__gte=now - timedelta(seconds=3 * window_s),
        started_at__isnull=False,
        gpus__gt=0,
    ).values_list("project__tenant_id", "project__tenant__slug", "gpus", "workers",
                  "created_at", "started_at", "finished_at")
    return [FinishedJob(t, key, g * w, c, s, f) for t, key, g, w, c, s, f in rows]


def fair_share_history(
    finished: list[FinishedJob],
    current: list[tuple[str, int, datetime]],
    quotas: dict[str, Quota],
    cluster_gpus: int,
    now: datetime,
    window_s: float,
) -> tuple[dict[str, float], dict[str, float]]:
    """Decayed GPU-seconds per tenant that it received and that it was entitled to
    (`policy.entitlement`), each second weighted by exp(-age / window).

    Received: the `finished` jobs (`finished_gpu_jobs`). Entitled: those jobs wanted GPUs
    from their submit to their end, and `current` (tenant key, GPUs, submit time: the
    queued and running jobs) wants them until now; every tenant's demand counts, since it
    shares the cluster with the others. Jobs cancelled before they started are not read,
    so their wait does not count for their tenant."""
    since = now - timedelta(seconds=3 * window_s)
    received: dict[str, float] = defaultdict(float)
    wanted = [(key, gpus, created.timestamp(), now.timestamp()) for key, gpus, created in current]
    for job in finished:
        seconds = max((job.finished_at - max(job.started_at, since)).total_seconds(), 0.0)
        age = max((now - job.finished_at).total_seconds(), 0.0)
        received[job.tenant_slug] += job.gpus * seconds * math.exp(-age / window_s)
        wanted.append((job.tenant_slug, job.gpus, job.created_at.timestamp(),
                       job.finished_at.timestamp()))
    entitled = entitled_history(wanted, quotas, cluster_gpus, now.timestamp(), window_s)
    return dict(received), entitled


# --- concrete devices ---------------------------------------------------------------------


class Devices:
    """Which GPU indices and CPU slots are free on each node (exclusive bookkeeping)."""

    def __init__(self, backend, nodes: list[Node], holders: list[Job]):
        self.gpus: dict[str, list[int]] = {}
        self.cpus: dict[str, list[int]] = {}
        if len(nodes) == 1:
            # One machine: the backend's real device indices (not necessarily 0…n-1).
            indices = {nodes[0].name: [g.index for g in backend.capacity().gpus]}
        else:
            indices = {n.name: list(range(n.gpus)) for n in nodes}
        used_g: dict[str, set[int]] = defaultdict(set)
        used_c: dict[str, set[int]] = defaultdict(set)
        default = nodes[0].name if len(nodes) == 1 else None
        for job in holders:
            hosts = job.placement.get("hosts") or {}
            for rank, gpus in (job.placement.get("gpus") or {}).items():
                used_g[hosts.get(rank, default)].update(gpus)
            for rank, slots in (job.placement.get("cpus") or {}).items():
                used_c[hosts.get(rank, default)].update(slots)
        for node in nodes:
            self.gpus[node.name] = [i for i in indices[node.name] if i not in used_g[node.name]]
            self.cpus[node.name] = [s for s in range(int(node.cpus)) if s not in used_c[node.name]]

    def assign(self, job: Job | QueuedJob, nodes: dict[str, int]) -> dict | None:
        """Placement with devices for each rank, or None (and nothing taken) if short."""
        hosts = [name for name, count in nodes.items() for _ in range(count)]
        need_g: dict[str, int] = defaultdict(int)
        need_c: dict[str, int] = defaultdict(int)
        for name in hosts:
            need_g[name] += job.gpus
            need_c[name] += job.cpus
        for name in need_g:
            if name not in self.gpus:
                return None
            if need_g[name] > len(self.gpus[name]) or need_c[name] > len(self.cpus[name]):
                return None
        placement = {"nodes": dict(nodes), "hosts": {}, "gpus": {}, "cpus": {}}
        for rank, name in enumerate(hosts):
            key = str(rank)
            placement["hosts"][key] = name
            placement["gpus"][key] = self.gpus[name][: job.gpus]
            del self.gpus[name][: job.gpus]
            placement["cpus"][key] = self.cpus[name][: job.cpus]
            del self.cpus[name][: job.cpus]
        return placement


# --- what services hold -------------------------------------------------------------------

SERVICES = "services:"  # the id prefix of a tenant's services entry (never a job's pk)
JOB_COUNT = re.compile(r"(already runs )(\d+) of its (\d+) jobs")


def services_entry(key: str, held: dict[str, int], nodes: list[Node], backend_name: str):
    """A tenant's services (endpoint replicas) as a running entry of the policy: one worker
    holding their GPUs, CPUs and memory, placed on the machine when the backend is local
    (they run there; elsewhere they count in the quota only). It is never a victim
    (`preemptible=False`); it has no estimated end (its start is left at infinity, so the
    reservation never counts on it freeing). Its priority is above any job's, so it also
    fills the tenant's guarantee first."""
    placement = {nodes[0].name: 1} if backend_name == "local" and len(nodes) == 1 else {}
    request = JobRequest(
        id=f"{SERVICES}{key}",
        tenant=key,
        priority=1 << 30,
        submit_time=0.0,
        workers=1,
        gpus_per_worker=held["gpus"],
        cpus_per_worker=float(held["cpus"]),
        memory_mb_per_worker=held["memory_mb"],
    )
    return RunningJob(request, placement, math.inf, preemptible=False)


def with_services(quotas: dict[str, Quota], services: dict[str, dict]) -> dict[str, Quota]:
    """The quotas with each services entry left out of the tenant's job count (max_jobs
    counts jobs; the entry counts as one running job in the policy)."""
    return {
        key: replace(q, max_jobs=q.max_jobs + 1)
        if key in services and q.max_jobs is not None
        else q
        for key, q in quotas.items()
    }


# --- free capacity, in words -------------------------------------------------------


@dataclass(frozen=True)
class Free:
    """What is left on the whole cluster after this pass's admissions."""

    gpus: int
    cpus: float
    memory_mb: int


def _plural(n: float, word: str) -> str:
    return f"{n:g} {word}{'' if n == 1 else 's'}"


def cpu_or_memory_shortfall(job: QueuedJob, free: Free, where: str) -> str | None:
    """The policy explains waits in GPUs; a job whose GPUs are free but which lacks CPUs or
    memory is told so instead ('waiting for 4 CPUs: 1 free on this machine')."""
    n = job.workers
    gang = f" ({n} workers)" if n > 1 else ""
    if job.gpus * n > free.gpus:
        return None
    if job.cpus * n > free.cpus:
        return (
            f"waiting for {_plural(job.cpus * n, 'CPU')}{gang}: {max(free.cpus, 0):g} free {where}"
        )
    if job.memory_mb * n > free.memory_mb:
        return (
            f"waiting for {job.memory_mb * n} MiB of memory{gang}: "
            f"{max(free.memory_mb, 0)} MiB free {where}"
        )
    return None


# --- words -----------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def in_words(code: str, message: str) -> str:
    """The policy's message as Gantry shows it: job #ids, MiB, and plain 'never'.

    Cached: a long queue repeats a few messages (one per job shape) in every pass."""
    message = re.sub(r"\bjob (\d+)\b", r"job #\1", message)
    message = re.sub(r"(\d) MB\b", r"\1 MiB", message)
    message = re.sub(
        r"tenant (\S+) uses (\d+) of its 0 guaranteed GPUs",
        r"tenant \1 has no guaranteed GPUs, uses \2,",
        message,
    )
    if code.startswith("too_large"):
        message = f"{message} — {NEVER}"
    return message


def _field_of(message: str) -> str:
    if re.match(r"needs \d+ (\S+ )?GPUs?\b", message):
        return "gpus"
    if re.match(r"needs [\d.]+ CPUs", message):
        return "cpus"
    if "of memory" in message:
        return "memory_mb"
    if "workers but" in message:
        return "workers"
    return "__all__"


def never_runs(project, spec: dict, backend=None) -> tuple[str, str] | None:
    """(form field, message) if a job of this shape can never start for the project's
    tenant — larger than every node or than the tenant's quota — else None."""
    backend = backend or get_backend()
    nodes = policy_nodes(backend)
    tenant = project.tenant
    quota = quota_for(
        tenant_key(tenant),
        TenantQuota.objects.filter(tenant=tenant).first(),
        sum(n.gpus for n in nodes),
    )
    probe = JobRequest(
        "new",
        tenant_key(tenant),
        0,
        0.0,
        spec.get("workers") or 1,
        spec.get("gpus") or 0,
        float(spec.get("cpus") or 1),
        spec.get("memory_mb") or 0,
    )
    decision = schedule(Snapshot(nodes, {quota.tenant: quota}, [], [probe]), 0.0, POLICY)
    wait = decision.waiting.get("new")
    if wait is None or not wait.code.startswith("too_large"):
        return None
    return _field_of(wait.message), in_words(wait.code, wait.message)


def tenant_limits(tenant) -> dict | None:
    """A tenant's hard limits (the Kubernetes backend's ResourceQuota, asked through
    `core.registry.tenant_limits`), or None when it has no quota row."""
    quota = TenantQuota.objects.filter(tenant=tenant).first()
    if quota is None:
        return None
    return {"gpus": quota.max_gpus, "cpus": quota.max_cpus, "memory_mb": quota.max_memory_mb}


# --- the pass -----------------------------------------------------------------------------


def _serialize_passes() -> None:
    """Two passes at once could each see the same free GPU. SQLite's IMMEDIATE
    transactions already serialize writers; PostgreSQL needs an advisory lock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADMISSION_LOCK])


def preemption_reason(why: str, tenant_of: dict[str, str]) -> str:
    """'preempted for job #12 of lab-a (borrowed capacity reclaimed)' and the like;
    `tenant_of` maps job ids to their `tenant_key`."""
    match = re.search(r"\bjob (\d+)\b", why)
    if match is None or match.group(1) not in tenant_of:
        return in_words("", why)
    who = f"job #{match.group(1)} of {tenant_of[match.group(1)]}"
    if "borrowed" in why:
        return f"preempted for {who} (borrowed capacity reclaimed)"
    return f"preempted for higher-priority {who}"


@transaction.atomic
def admission_pass(backend=None, now: datetime | None = None) -> list[Job]:
    """One scheduling pass: admit, preempt, explain. Returns the jobs admitted.

    Read the queue and what runs (as the policy's Snapshot), let the pure policy decide,
    then carry the decision out case by case: stop the victims, admit the chosen jobs
    onto devices, and tell every job left waiting why and when it should start.
    """
    backend = backend or get_backend()
    _serialize_passes()
    queue = queued_jobs(backend.name)
    if not queue:
        return []
    now = now or timezone.now()
    nodes = policy_nodes(backend)
    active = Job.objects.filter(state__in=ACTIVE, backend=backend.name)
    # Jobs already asked to stop for a preemption are left out: their resources are
    # promised to the jobs admitted in their place.
    running = [j for j in active.select_related("project__tenant") if j.preempt_requested_at is None]
    snapshot = read_snapshot(queue, running, nodes, now, backend.name)
    decision = schedule(snapshot, now.timestamp(), POLICY)

    queued_by_id = {str(j.pk): j for j in queue}
    running_by_id = {str(j.pk): j for j in running}
    victims = [(running_by_id[vid], why) for vid, why in decision.preempt if vid in running_by_id]
    _preempt(victims, queued_by_id, running_by_id)
    victim_ids = {v.pk for v, _ in victims}
    staying = [j for j in running if j.pk not in victim_ids]
    services = [rj.request for rj in snapshot.running if rj.request.id.startswith(SERVICES)]
    admitted, short = _admit(
        decision, queued_by_id, staying, nodes, snapshot.quotas, backend, services
    )
    free = _free(nodes, staying + admitted, services if backend.name == "local" else ())
    _explain(_waiting(decision, queued_by_id, short, free, backend, services))
    return admitted


def read_snapshot(
    queue: list[QueuedJob], running: list[Job], nodes: list[Node], now, backend_name: str = ""
) -> Snapshot:
    """What the policy decides on: nodes, quotas, what runs and where (services included),
    what waits, and the fair-share history of the tenants in any of them."""
    tenants = {j.tenant_id: j.tenant_slug for j in queue}  # id -> tenant_key
    tenants.update((j.project.tenant_id, tenant_key(j.project.tenant)) for j in running)
    cluster_gpus = sum(n.gpus for n in nodes)
    finished = finished_gpu_jobs(now, POLICY.usage_window_s)
    tenants.update((j.tenant_id, j.tenant_slug) for j in finished)
    held = service_holdings()
    if held:
        tenants.update(Tenant.objects.filter(pk__in=held).values_list("pk", "slug"))
    services = {tenants[pk]: h for pk, h in held.items() if pk in tenants}
    quotas = with_services(quotas_by_id(tenants, cluster_gpus), services)
    current = [(j.tenant_slug, j.gpus * j.workers, j.created_at) for j in queue]
    current.extend((tenant_key(j.project.tenant), j.gpus * j.workers, j.created_at) for j in running)
    received, entitled = fair_share_history(
        finished, current, quotas, cluster_gpus, now, POLICY.usage_window_s
    )
    return Snapshot(
        nodes=nodes,
        quotas=quotas,
        running=[
            RunningJob(
                job_request(j, tenant_key(j.project.tenant)),
                node_placement(j, nodes),
                (j.started_at or j.admitted_at or now).timestamp(),
            )
            for j in running
        ]
        + [services_entry(key, h, nodes, backend_name) for key, h in services.items()],
        pending=[job_request(j, j.tenant_slug) for j in queue],
        usage_history=received,
        entitled_history=entitled,
        work_lost={
            **{str(pk): s for pk, s in work_lost(running, now).items()},
            **{f"{SERVICES}{key}": 0.0 for key in services},
        },
    )


def _preempt(victims: list[tuple[Job, str]], queued_by_id: dict, running_by_id: dict) -> None:
    """Ask the policy's victims to stop (checkpoint first where they can), each with the
    job it makes room for in its reason."""
    from jobs.services.lifecycle import preempt_job

    if not victims:
        return
    tenant_of = {jid: j.tenant_slug for jid, j in queued_by_id.items()}
    tenant_of.update((jid, tenant_key(j.project.tenant)) for jid, j in running_by_id.items())
    for victim, why in victims:
        preempt_job(victim, preemption_reason(why, tenant_of))


def _admit(
    decision,
    queued_by_id: dict[str, QueuedJob],
    staying: list[Job],
    nodes,
    quotas,
    backend,
    services: list[JobRequest] = (),
) -> tuple[list[Job], dict[str, str]]:
    """Admit the policy's choices onto devices (GPU indices, CPU slots) not held by the
    jobs that stay. Returns the admitted jobs and, for a choice whose devices are still
    held (a victim within its grace period), why it waits. `services` (the services
    entries) take their tenants' guarantee first, for the "borrowed" in the reason."""
    devices = Devices(backend, nodes, staying)
    used = defaultdict(int)
    for r in services:
        used[r.tenant] += r.total_gpus
    for j in staying:
        used[tenant_key(j.project.tenant)] += j.gpus * j.workers
    to_admit = Job.objects.select_related("project__tenant").in_bulk(
        [queued_by_id[jid].pk for jid, _ in decision.admit]
    )
    admitted: list[Job] = []
    short: dict[str, str] = {}
    for jid, nodes_of in decision.admit:
        queued = queued_by_id[jid]
        placement = devices.assign(queued, nodes_of)
        if placement is None:
            short[jid] = f"waiting for devices to be released {backend.where}"
            continue
        key = queued.tenant_slug
        used[key] += queued.gpus * queued.workers
        reason = f"admitted {backend.where}"
        if queued.gpus and used[key] > quotas[key].guaranteed_gpus:
            reason += f" on idle GPUs borrowed beyond {key}'s guarantee (may be preempted)"
        job = to_admit.get(queued.pk)  # None: deleted since the queue was read
        if job is not None and transition(job, JobState.ADMITTED, reason, placement=placement):
            admitted.append(job)
    return admitted, short


def _free(nodes: list[Node], holding: list[Job], services: list[JobRequest] = ()) -> Free:
    """What the cluster has left once the jobs that stay and the admitted ones hold theirs,
    and the `services` entries that run on it (the local backend's machine)."""
    return Free(
        gpus=sum(n.gpus for n in nodes) - sum(j.gpus * j.workers for j in holding)
        - sum(r.total_gpus for r in services),
        cpus=sum(n.cpus for n in nodes) - sum(j.cpus * j.workers for j in holding)
        - sum(r.total_cpus for r in services),
        memory_mb=sum(n.memory_mb for n in nodes) - sum(j.memory_mb * j.workers for j in holding)
        - sum(r.total_memory_mb for r in services),
    )


def _waiting(
    decision, queued_by_id, short: dict[str, str], free: Free, backend, services=()
) -> list[Explained]:
    """Each waiting job's reason in words (a CPU or memory shortfall named where that is
    what holds it), its place in the queue and its estimated start. A tenant's services
    entry counts as one running job in the policy (`with_services`): the job count in
    its reason is told without it."""
    with_entry = {r.tenant for r in services}
    explained: list[Explained] = []
    for jid, wait in decision.waiting.items():
        queued = queued_by_id[jid]
        reason = in_words(wait.code, wait.message)
        if wait.code == "quota" and queued.tenant_slug in with_entry:
            reason = JOB_COUNT.sub(
                lambda m: f"{m[1]}{int(m[2]) - 1} of its {int(m[3]) - 1} jobs", reason
            )
        if wait.code in ("capacity", "gang"):
            reason = cpu_or_memory_shortfall(queued, free, backend.where) or reason
        eta = (
            datetime.fromtimestamp(wait.estimated_start, tz=UTC)
            if wait.estimated_start is not None and math.isfinite(wait.estimated_start)
            else None
        )
        explained.append((queued, reason, wait.position, eta))
    explained.extend((queued_by_id[jid], reason, None, None) for jid, reason in short.items())
    return explained


def _explain(explained: list[Explained]) -> None:
    """Write the reason, position and estimated start of waiting jobs where they changed.

    The reason is the job's (`Job.state_reason`); position and start are its
    `JobScheduling` row. Both are written only while the job is still queued, and by one
    statement each run over the changed rows, not an ORM call each: a job that moves up a
    long queue shifts the position of every job behind it (a thousand single updates took
    half a second; bench/admission_queue.py measures the pass).
    """
    eta_field = JobScheduling._meta.get_field("estimated_start_at")
    reasons, places = [], []
    for job, reason, position, eta in explained:
        reason = reason[:500]
        if eta is not None:
            eta = eta.replace(microsecond=0)
        if reason != job.state_reason:
            reasons.append((reason, job.pk, JobState.QUEUED))
        if (position, eta) != (job.queue_position, job.estimated_start_at):
            places.append((position, eta_field.get_db_prep_value(eta, connection), job.pk, JobState.QUEUED))
    with connection.cursor() as cursor:
        if reasons:
            cursor.executemany(
                f"UPDATE {Job._meta.db_table} SET state_reason = %s WHERE id = %s AND state = %s",
                reasons,
            )
        if places:  # an upsert, in the syntax SQLite and PostgreSQL share
            cursor.executemany(
                f"INSERT INTO {JobScheduling._meta.db_table} "
                "(job_id, queue_position, estimated_start_at) "
                f"SELECT id, %s, %s FROM {Job._meta.db_table} WHERE id = %s AND state = %s "
                "ON CONFLICT (job_id) DO UPDATE SET queue_position = excluded.queue_position, "
                "estimated_start_at = excluded.estimated_start_at",
                places,
            )
