"""The faster pass decides exactly as the policy before it (issue 40): on many random states
and configurations, ``schedule`` and ``schedule_fifo`` give the same admissions and
placements, preemptions and their reasons, waiting reasons, positions and ETAs, and the same
reservation as the copy kept in ``bench/scheduler_policy_baseline``."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given

from bench.scheduler_policy_baseline import schedule as baseline_schedule
from bench.scheduler_policy_baseline.schedule_pass import schedule_fifo as baseline_fifo
from scheduling import (
    JobRequest,
    Node,
    PolicyConfig,
    QueueCache,
    Quota,
    RunningJob,
    Snapshot,
    schedule,
    schedule_fifo,
)
from tests.scheduling.test_policy import PROPS, scenarios

CONFIGS = {
    "default": PolicyConfig(),
    "issue_28_order": PolicyConfig(guarantees_before_rank=False),
    "plain_priority": PolicyConfig(fair_share=False),
    "no_backfill": PolicyConfig(backfill=False),
    "no_preemption": PolicyConfig(preemption=False),
    "reclaim_at_once": PolicyConfig(min_runtime_before_preempt_s=0.0, reclaim_after_wait_s=0.0,
                                    reclaim_work_ratio=float("inf"),
                                    reclaim_min_remaining_s=0.0, checkpoint_aware=True),
    "las_preempt": PolicyConfig(las_preempt_borrowed=True, reclaim_after_wait_s=300.0,
                                min_runtime_before_preempt_s=0.0),
    "guarantee_first_boost": PolicyConfig(guarantee_first=True, guarantee_boost_s=1800.0),
    "fifo_tail": PolicyConfig(fifo_tail_fraction=0.1),
    "fifo_head_age": PolicyConfig(fifo_head=True, fifo_age_s=2000.0),
}


def as_plain(decision) -> tuple:
    """A decision as plain values, comparable across the two implementations' classes."""
    res = decision.reservation
    return (
        [(job_id, dict(placement)) for job_id, placement in decision.admit],
        list(decision.preempt),
        {job_id: tuple(w) for job_id, w in decision.waiting.items()},
        None if res is None else (res.job_id, res.start, dict(res.placement)),
    )


def random_state(rng: random.Random, ties: bool = False, queue: int = 200) -> Snapshot:
    """A cluster of mixed nodes and GPU models, tenants with varied quotas, running jobs
    placed where they fit, a queue of gangs and single jobs (some without an estimate, some
    with attained service), and the histories fair share reads. ``ties``: submit times and
    estimates from a few values, so that many jobs share a rank key but for their ids;
    ``queue``: the most pending jobs."""
    models = ["", "", "a100"]
    nodes = [Node(f"n{i:03d}", rng.choice([0, 4, 8, 8, 8]), rng.choice([16, 64]),
                  rng.choice([64_000, 512_000]), rng.choice(models))
             for i in range(rng.randint(1, 40))]
    tenants = [f"t{i}" for i in range(rng.randint(1, 8))]
    quotas = {t: Quota(t, rng.choice([0, 4, 8, 16, 64]), rng.choice([0, 8, 64, 256]),
                       max_cpus=rng.choice([None, None, 128.0]),
                       max_jobs=rng.choice([None, None, 5, 30]),
                       weight=rng.choice([0.5, 1.0, 2.0]))
              for t in tenants}
    tenant_names = tenants + ["stranger"] * (rng.random() < 0.2)

    def job(jid: str) -> JobRequest:
        g = rng.choice([0, 1, 1, 1, 1, 2, 4, 8, 16, 32])
        workers, per = (1, g) if g <= 8 else (g // 8, 8)
        if rng.random() < 0.1:
            workers, per = rng.randint(2, 4), rng.choice([1, 2])
        submit = float(rng.choice([-3600, 0]) if ties else rng.randint(-90_000, 0))
        estimate = rng.choice([None, 600.0, 3600.0, 36_000.0] + [rng.uniform(60, 1e5)] * (
            not ties))
        return JobRequest(jid, rng.choice(tenant_names), rng.choice([0, 0, 0, 1, 2]), submit,
                          workers, per, rng.choice([1.0, 4.0, 8.0]), rng.choice([1000, 32_000]),
                          estimate, rng.choice(models + ["", ""]))

    free = {n.name: [n.gpus, float(n.cpus), n.memory_mb, n.gpu_model] for n in nodes}
    running = []
    for i in range(rng.randint(0, 80)):
        r = job(f"r{i}")
        if r.tenant not in quotas:
            continue
        placement: dict[str, int] = {}
        for _ in range(r.workers):
            fits = [name for name, f in free.items()
                    if f[0] >= r.gpus_per_worker and f[1] >= r.cpus_per_worker
                    and f[2] >= r.memory_mb_per_worker
                    and (not r.gpu_model or f[3] == r.gpu_model)]
            if not fits:
                break
            name = rng.choice(fits)
            f = free[name]
            f[0] -= r.gpus_per_worker
            f[1] -= r.cpus_per_worker
            f[2] -= r.memory_mb_per_worker
            placement[name] = placement.get(name, 0) + 1
        if sum(placement.values()) == r.workers:
            running.append(RunningJob(r, placement, float(rng.randint(-50_000, 0)),
                                      rng.random() < 0.5))
        else:  # give back the workers of a gang that did not fit
            for name, w in placement.items():
                f = free[name]
                f[0] += w * r.gpus_per_worker
                f[1] += w * r.cpus_per_worker
                f[2] += w * r.memory_mb_per_worker
    pending = [job(f"p{i}") for i in range(rng.randint(queue // 4, queue))]
    ids = [r.id for r in pending] + [rj.request.id for rj in running]
    return Snapshot(
        nodes, quotas, running, pending,
        usage_history={t: rng.uniform(0, 1e7) for t in tenants if rng.random() < 0.8},
        entitled_history={t: rng.uniform(0, 1e7) for t in tenants if rng.random() < 0.8},
        work_lost={i: rng.uniform(0, 1e5) for i in ids if rng.random() < 0.3},
        attained={i: rng.choice([10.0, 5000.0, 50_000.0]) for i in ids if rng.random() < 0.3},
    )


# las_preempt_borrowed decides otherwise than the baseline by design since it was frozen: a
# tenant's most-served running jobs are the borrowed ones (test_fairness.py). Its cached
# passes still decide as uncached ones (test_a_pass_with_the_queues_of_the_pass_before...).
AS_BASELINE = [name for name in CONFIGS if name != "las_preempt"]


@pytest.mark.parametrize("config", AS_BASELINE)
def test_the_pass_decides_as_the_baseline_on_random_states(config):
    cfg = CONFIGS[config]
    rng = random.Random(f"equivalence-{config}")
    for _ in range(60):
        snap = random_state(rng)
        now = rng.choice([0.0, 200.0, 5000.0])
        assert as_plain(schedule(snap, now, cfg)) == as_plain(baseline_schedule(snap, now, cfg))


@pytest.mark.parametrize("config", ["default", "plain_priority", "reclaim_at_once"])
def test_the_pass_decides_as_the_baseline_where_rank_keys_tie(config):
    cfg = CONFIGS[config]
    rng = random.Random(f"ties-{config}")
    for _ in range(60):
        snap = random_state(rng, ties=True)
        assert as_plain(schedule(snap, 0.0, cfg)) == as_plain(baseline_schedule(snap, 0.0, cfg))


def late_fits_state(rng: random.Random, ties: bool = False) -> Snapshot:
    """Hundreds of queued jobs of two like tenants at their quotas, and a few of a tenant
    with room submitted among the last of them: they start after long runs of jobs that
    wait. ``ties``: the two tenants' jobs share submit times and estimates (and the tenants
    their fair-share standing), so rank keys tie across tenants."""
    nodes = [Node(f"n{i}", 8, 64, 512_000) for i in range(4)]
    quotas = {"busy1": Quota("busy1", 8), "busy2": Quota("busy2", 8),
              "room": Quota("room", 8, 16)}
    running = [RunningJob(JobRequest(f"held{k}", f"busy{k}", 0, -90_000.0, 1, 8, 8.0, 8000,
                                     86_400.0), {f"n{k - 1}": 1}, -80_000.0)
               for k in (1, 2)]

    def job(jid: str, tenant: str, submit: float) -> JobRequest:
        estimate = rng.choice([600.0, 3600.0] if ties else [None, 600.0, rng.uniform(60, 1e5)])
        return JobRequest(jid, tenant, rng.choice([0, 0, 1]), submit, 1, rng.choice([1, 2]),
                          2.0, 8000, estimate)

    def busy_submit() -> float:
        return float(rng.choice([-7200, -3600])) if ties else rng.uniform(-90_000, 0)

    pending = [job(f"b{i}", rng.choice(["busy1", "busy2"]), busy_submit())
               for i in range(rng.randint(600, 1200))]
    pending += [job(f"r{i}", "room", rng.uniform(-20_000, 0)) for i in range(rng.randint(1, 8))]
    rng.shuffle(pending)
    history = {} if ties else {t: rng.uniform(0, 1e6) for t in quotas}
    return Snapshot(nodes, quotas, running, pending, usage_history=history)


@pytest.mark.parametrize("config", ["default", "no_backfill", "fifo_tail"])
def test_the_pass_decides_as_the_baseline_on_long_queues(config):
    """Queues long enough that the ranker orders the rest at once (hundreds of jobs in a
    row waiting), ties included, and jobs that start after such a run."""
    cfg = CONFIGS[config]
    rng = random.Random(f"long-{config}")
    for k in range(16):
        snap = (random_state(rng, ties=k % 4 == 1, queue=1500) if k % 2
                else late_fits_state(rng, ties=k % 4 == 2))
        assert as_plain(schedule(snap, 0.0, cfg)) == as_plain(baseline_schedule(snap, 0.0, cfg))


def test_fifo_decides_as_the_baseline_on_random_states():
    rng = random.Random("equivalence-fifo")
    for _ in range(60):
        snap = random_state(rng)
        assert as_plain(schedule_fifo(snap, 0.0)) == as_plain(baseline_fifo(snap, 0.0))


@PROPS
@given(scenarios())
def test_the_pass_decides_as_the_baseline_on_small_states(snap: Snapshot):
    for cfg in (CONFIGS["default"], CONFIGS["reclaim_at_once"], CONFIGS["no_backfill"]):
        assert as_plain(schedule(snap, 0.0, cfg)) == as_plain(baseline_schedule(snap, 0.0, cfg))


def next_state(rng: random.Random, snap: Snapshot, step: int) -> Snapshot:
    """The state a pass later: some queued jobs gone (started or cancelled), new ones (some
    without an estimate, moving the median the ranking uses for them), some changed in place
    (priority, estimate: a new request object under the same id), attained service moved
    across levels, and now and then a node more or fewer (the ranking's scale) or no
    attained service at all (its levels off); some running jobs end, others start in their
    place (of other tenants and priorities, now and then with a fraction of a CPU, which
    the sums kept from pass to pass cannot follow exactly). The other requests and running
    jobs are the same objects."""
    # Half the time in place, as the benchmark's states change (each new job where one
    # left, the rest where it was: the caches compare the lists position by position).
    in_place = rng.random() < 0.5
    pending = [r for r in snap.pending if in_place or rng.random() > 0.1]
    for k, r in enumerate(pending):
        if rng.random() < 0.05:
            pending[k] = dataclasses.replace(
                r, priority=rng.choice([0, 1, 2]),
                estimated_duration=rng.choice([None, 600.0, rng.uniform(60, 1e5)]))
    tenants = list(snap.quotas) + ["stranger"]
    for i in range(rng.randint(0, 30)):
        g = rng.choice([0, 1, 1, 2, 8, 16])
        workers, per = (1, g) if g <= 8 else (g // 8, 8)
        r = JobRequest(f"s{step}-{i}", rng.choice(tenants), rng.choice([0, 0, 1]),
                       float(rng.randint(-90_000, 0)), workers, per, 1.0, 1000,
                       rng.choice([None, 60.0, 3600.0, rng.uniform(60, 1e5)]))
        if in_place and pending:
            pending[rng.randrange(len(pending))] = r
        else:
            pending.append(r)
    if not in_place:
        rng.shuffle(pending)
    attained = dict(snap.attained)
    for r in rng.sample(pending, min(len(pending), 5)):
        attained[r.id] = rng.choice([0.0, 10.0, 5000.0, 50_000.0])
    if rng.random() < 0.1:
        attained = {}
    nodes = list(snap.nodes)
    if rng.random() < 0.15:
        nodes = nodes[:-1] if len(nodes) > 1 and rng.random() < 0.5 else nodes + [
            Node(f"x{step}", 8, 64, 512_000)]
    running = []
    for k, rj in enumerate(snap.running):
        if not in_place and rng.random() < 0.05:
            continue  # it ended
        if rng.random() < 0.1:  # it ended, and another started on its nodes
            rj = RunningJob(
                dataclasses.replace(
                    rj.request, id=f"rs{step}-{k}", tenant=rng.choice(list(snap.quotas)),
                    priority=rng.choice([0, 0, 1, 2]),
                    cpus_per_worker=rng.choice([rj.request.cpus_per_worker] * 4 + [0.3])),
                rj.placement, float(rng.randint(-5000, 0)), rj.borrowed)
        running.append(rj)
    return Snapshot(nodes, snap.quotas, running, pending, snap.usage_history,
                    snap.entitled_history, snap.work_lost, attained)


@pytest.mark.parametrize("config", ["default", "issue_28_order", "las_preempt", "fifo_tail",
                                    "guarantee_first_boost", "plain_priority",
                                    "rounded_up_slice"])
def test_a_pass_with_the_queues_of_the_pass_before_decides_as_one_without(config):
    """``QueueCache`` ranks only what changed since the pass before; over sequences of
    passes each decision is the one a pass that ranks everything anew makes."""
    cfg = CONFIGS.get(config) or dataclasses.replace(CONFIGS["las_preempt"],
                                                     rounded_up_slice=True)
    rng = random.Random(f"cache-{config}")
    for _ in range(6):
        cache = QueueCache()
        snap = random_state(rng, ties=rng.random() < 0.3)
        for step in range(12):
            assert as_plain(schedule(snap, 0.0, cfg, cache)) == as_plain(
                schedule(snap, 0.0, cfg)), f"step {step}"
            snap = next_state(rng, snap, step)


RECLAIM_AFTER_WAIT = PolicyConfig(reclaim_after_wait_s=300.0, min_runtime_before_preempt_s=0.0,
                                  reclaim_work_ratio=float("inf"), reclaim_min_remaining_s=0.0)


@pytest.mark.parametrize("config", ["default", "reclaim_at_once", "no_backfill",
                                    "reclaim_after_wait"])
def test_jobs_held_for_the_reservation_are_answered_as_by_the_baseline(config):
    """Many jobs of one shape that fit now but would run past the reserved start: each is
    held in the words of its own estimate (the answer one of them gets holds for the rest of
    its shape only where no preemption search could start a later one, such as one that
    has waited long enough to reclaim), as the baseline answers each anew."""
    cfg = CONFIGS.get(config, RECLAIM_AFTER_WAIT)
    rng = random.Random(f"held-{config}")
    quotas = {"a": Quota("a", 4, 16), "b": Quota("b", 8, 16)}  # a's 8 GPUs: 4 borrowed
    nodes = [Node(f"n{i}", 8, 64, 512_000) for i in range(2)]
    for _ in range(10):
        running = [RunningJob(JobRequest("ra", "a", 0, -9000.0, 1, 8, 8.0, 8000, 9000.0),
                              {"n0": 1}, -2000.0),
                   RunningJob(JobRequest("rb", "b", rng.choice([0, 1]), -9000.0, 1, 4, 4.0,
                                         4000, rng.choice([None, 20_000.0])),
                              {"n1": 1}, -3000.0)]
        pending = [JobRequest("head", "a", 1, -8000.0, 2, 8, 8.0, 8000, 3600.0)]
        pending += [JobRequest(f"p{i}", rng.choice("ab"), rng.choice([0, 0, 1]),
                               float(rng.choice([-7000, -400, -100, 0])), 1, 1, 1.0, 1000,
                               rng.choice([None, 60.0, 600.0, 3600.0, 86_400.0]))
                    for i in range(rng.randint(5, 60))]
        snap = Snapshot(nodes, quotas, running, pending)
        before = as_plain(baseline_schedule(snap, 0.0, cfg))
        assert as_plain(schedule(snap, 0.0, cfg)) == before
        assert as_plain(schedule(snap, 0.0, cfg, QueueCache())) == before
