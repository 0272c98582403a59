"""Checkpoint-aware victim choice in the pure policy: among the jobs it may preempt, the
one that would lose the least work since its last checkpoint goes first."""

from scheduling.policy.data import JobRequest, Node, PolicyConfig, Quota, RunningJob, Snapshot
from scheduling.policy.schedule_pass import schedule

NOW = 10_000.0
CFG = PolicyConfig(
    min_runtime_before_preempt_s=0.0,
    reclaim_after_wait_s=0.0,
    reclaim_work_ratio=float("inf"),
    reclaim_min_remaining_s=0.0,
)


def job(jid, tenant, priority=0, gpus=1, submit=0.0):
    return JobRequest(
        id=jid, tenant=tenant, submit_time=submit, priority=priority, workers=1,
        gpus_per_worker=gpus, cpus_per_worker=1, memory_mb_per_worker=1024,
    )


def snapshot(work_lost=None):
    # Two 1-GPU jobs of tenant b run on borrowed GPUs; tenant a (guaranteed 2) wants one.
    running = [
        RunningJob(job("old", "b"), {"n1": 1}, start_time=NOW - 9000),  # ran long
        RunningJob(job("new", "b"), {"n1": 1}, start_time=NOW - 100),  # ran briefly
    ]
    return Snapshot(
        nodes=[Node("n1", gpus=2, cpus=8, memory_mb=16384)],
        quotas={"a": Quota("a", guaranteed_gpus=2), "b": Quota("b", 0, borrow_limit_gpus=2)},
        running=running,
        pending=[job("claim", "a", submit=NOW - 10)],
        work_lost=work_lost or {},
    )


def victims(snap, cfg):
    return [jid for jid, _ in schedule(snap, NOW, cfg).preempt]


def test_without_checkpoints_the_job_that_ran_least_is_preempted():
    assert victims(snapshot(), CFG) == ["new"]


def test_checkpoint_aware_preempts_the_job_that_loses_least_since_its_checkpoint():
    # "old" checkpointed 30 s ago; "new" never did (100 GPU-seconds lost).
    snap = snapshot({"old": 30.0, "new": 100.0})
    assert victims(snap, PolicyConfig(**{**_fields(CFG), "checkpoint_aware": True})) == ["old"]


def test_work_lost_orders_before_priority_when_checkpoint_aware():
    snap = snapshot({"old": 30.0, "new": 100.0})
    snap.running = [
        RunningJob(job("old", "b", priority=5), {"n1": 1}, start_time=NOW - 9000),
        RunningJob(job("new", "b", priority=-5), {"n1": 1}, start_time=NOW - 100),
    ]
    aware = PolicyConfig(**{**_fields(CFG), "checkpoint_aware": True})
    assert victims(snap, aware) == ["old"]
    assert victims(snap, CFG) == ["new"]  # today's rule: lowest priority first


def test_jobs_that_may_not_be_preempted_stay_whatever_they_would_lose():
    snap = snapshot({"old": 0.0, "new": 100.0})
    # Tenant b is within its guarantee now: none of its jobs is borrowed.
    snap.quotas = {"a": Quota("a", 0, borrow_limit_gpus=2), "b": Quota("b", guaranteed_gpus=2)}
    aware = PolicyConfig(**{**_fields(CFG), "checkpoint_aware": True})
    assert victims(snap, aware) == []


def _fields(cfg):
    return {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}
