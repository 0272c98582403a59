"""The pass's bookkeeping shortcuts (issue 28, pass speed) decide exactly as the plain rules say.

``schedule()`` skips work where the answer is known: a tenant whose running jobs fit in its
guarantee has no borrowed job (no sort), running jobs become preemption candidates only on
the first preemption search, the reservation sorts running jobs' ends as (end, id) tuples,
and memo keys use per-pass shape numbers. These tests pin the decisions those shortcuts
must keep (each also passed on the code before them). Pure policy: no Django, no database.
"""

from __future__ import annotations

import random

from scheduling import JobRequest, Node, PolicyConfig, Quota, RunningJob, Snapshot, schedule

IMMEDIATE = PolicyConfig(min_runtime_before_preempt_s=0.0, reclaim_after_wait_s=0.0,
                         reclaim_work_ratio=float("inf"), reclaim_min_remaining_s=0.0)


def job(jid: str, tenant: str = "a", gpus: int = 1, workers: int = 1, *, prio: int = 0,
        submit: float = 0.0, est: float | None = 100.0) -> JobRequest:
    return JobRequest(jid, tenant, prio, submit, workers, gpus, 1.0, 1000, est)


def nodes(n: int) -> list[Node]:
    return [Node(f"n{i}", 8, 64, 512_000) for i in range(n)]


def test_tenant_exactly_at_its_guarantee_has_nothing_borrowed():
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}
    # a runs exactly its 8 guaranteed GPUs: none of them may be reclaimed by b.
    at_guarantee = [RunningJob(job("a1", "a", 4), {"n0": 1}, -300),
                    RunningJob(job("a2", "a", 4), {"n0": 1}, -200),
                    RunningJob(job("a3", "a", 8), {"n1": 1}, -100)]
    d = schedule(Snapshot(nodes(2), quotas, at_guarantee[:2] + [
        RunningJob(job("b0", "b", 8), {"n1": 1}, -100)], [job("b1", "b", 4)]), 0, IMMEDIATE)
    assert d.preempt == [] and d.admit == []
    # One more job puts a over it: the most recently started one is borrowed, and only it.
    d = schedule(Snapshot(nodes(2), quotas, at_guarantee, [job("b1", "b", 8)]), 0, IMMEDIATE)
    assert [vid for vid, _ in d.preempt] == ["a3"]
    assert d.admit == [("b1", {"n1": 1})]


def test_reservation_breaks_ties_in_end_time_by_job_id():
    quotas = {"a": Quota("a", 24, 0)}
    # Both running jobs end at 100; the one with the smaller id is counted first, so the
    # reserved placement is its node whichever node that is.
    for first_node, other in (("n0", "n1"), ("n1", "n0")):
        busy = [RunningJob(job("r1", "a", 8, est=100), {first_node: 1}, 0),
                RunningJob(job("r2", "a", 8, est=100), {other: 1}, 0)]
        d = schedule(Snapshot(nodes(2), quotas, busy, [job("head", "a", 8)]), 0)
        assert d.reservation is not None
        assert d.reservation.start == 100
        assert dict(d.reservation.placement) == {first_node: 1}


def test_preemption_after_a_reservation_in_the_same_pass():
    # b's 8-GPU job cannot start (a's job is within a's guarantee, so not reclaimable) and
    # gets the reservation; a's own higher-priority job then preempts a's low-priority one:
    # the preemption search runs after the reservation was made.
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}
    busy = [RunningJob(job("low", "a", 8, est=1000), {"n0": 1}, -600),
            RunningJob(job("b0", "b", 8, prio=1, est=700), {"n1": 1}, -600)]
    pend = [job("b1", "b", 8, prio=1, submit=0), job("a-hi", "a", 8, prio=1, submit=500, est=10)]
    d = schedule(Snapshot(nodes(2), quotas, busy, pend), 0, IMMEDIATE)
    assert d.reservation is not None and d.reservation.job_id == "b1"
    assert d.reservation.start == 100
    assert [vid for vid, _ in d.preempt] == ["low"]
    assert d.admit == [("a-hi", {"n0": 1})]
    assert d.waiting["b1"].position == 1


def test_repeated_shapes_get_their_own_answers():
    # Many jobs share a few shapes across tenants and priorities: the memos (keyed by
    # per-pass shape numbers) must keep each (tenant, shape) apart. Whether a job can ever
    # run does not depend on the rest of the queue: each job's too_large_* answer in the
    # batch equals its answer in a pass of its own.
    rng = random.Random(7)
    quotas = {"a": Quota("a", 8, 0), "b": Quota("b", 24, 8), "c": Quota("c", 0, 0)}
    busy = [RunningJob(job(f"r{i}", "b", 8), {f"n{i}": 1}, -100) for i in range(3)]
    pend = [job(f"p{i}", rng.choice("abcd"), rng.choice([1, 8, 16, 40]),
                rng.choice([1, 2]), prio=rng.choice([0, 1]), submit=i) for i in range(60)]
    d = schedule(Snapshot(nodes(4), quotas, busy, pend), 0)
    assert {w.code for w in d.waiting.values()} >= {"quota", "too_large_for_quota",
                                                   "too_large_for_cluster"}
    for r in pend:
        alone = schedule(Snapshot(nodes(4), quotas, busy, [r]), 0).waiting.get(r.id)
        in_batch = d.waiting.get(r.id)
        if alone is not None and alone.code.startswith("too_large"):
            assert in_batch is not None
            assert (in_batch.code, in_batch.message) == (alone.code, alone.message)
        elif in_batch is not None:
            assert not in_batch.code.startswith("too_large")
