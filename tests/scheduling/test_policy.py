"""Unit and property tests of the pure scheduling policy (no Django, no database)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import (
    WAIT_CODES,
    JobRequest,
    Node,
    PolicyConfig,
    Quota,
    RunningJob,
    Snapshot,
    human_duration,
    schedule,
    schedule_fifo,
)
from scheduling.policy.entitlement import entitled_history


def node(name: str, gpus: int = 8, cpus: float = 64, mem: int = 512_000, model: str = "") -> Node:
    return Node(name, gpus, cpus, mem, model)


def job(jid: str, tenant: str = "a", gpus: int = 1, workers: int = 1, *, prio: int = 0,
        submit: float = 0.0, est: float | None = 100.0, cpus: float = 1, mem: int = 1000,
        model: str = "") -> JobRequest:
    return JobRequest(jid, tenant, prio, submit, workers, gpus, cpus, mem, est, model)


# Preemption without the guards (minimum runtime, reclaim work ratio): what the unit tests of
# victim selection exercise; the guards have their own test.
IMMEDIATE = PolicyConfig(min_runtime_before_preempt_s=0.0, reclaim_after_wait_s=0.0,
                         reclaim_work_ratio=float("inf"), reclaim_min_remaining_s=0.0)


def running(req: JobRequest, placement: dict[str, int], start: float = 0.0) -> RunningJob:
    return RunningJob(req, placement, start, False)


# --------------------------------------------------------------------------- unit tests


def test_best_fit_packs_the_fullest_node_that_fits():
    nodes = [node("n0"), node("n1"), node("n2")]
    quotas = {"a": Quota("a", 24, 0)}
    busy = [running(job("r1", gpus=5), {"n1": 1}), running(job("r2", gpus=6), {"n2": 1})]
    d = schedule(Snapshot(nodes, quotas, busy, [job("p", gpus=2)]), 0)
    assert d.admit == [("p", {"n2": 1})]  # n2 has 2 free: the tightest fit
    d = schedule(Snapshot(nodes, quotas, busy, [job("p", gpus=3)]), 0)
    assert d.admit == [("p", {"n1": 1})]


def test_gang_is_all_or_nothing_and_worker_never_spans_nodes():
    nodes = [node("n0"), node("n1")]
    quotas = {"a": Quota("a", 32, 0)}
    busy = [running(job("r0", gpus=4), {"n0": 1}), running(job("r1", gpus=4), {"n1": 1})]
    # 8 GPUs free in total but no node has 8 free: a single 8-GPU worker cannot start.
    d = schedule(Snapshot(nodes, quotas, busy, [job("big", gpus=8)]), 0)
    assert d.admit == []
    assert d.waiting["big"].code == "capacity"
    assert "no single node" in d.waiting["big"].message
    # Three 4-GPU workers need 12 GPUs: none placed, even though two would fit.
    d = schedule(Snapshot(nodes, quotas, busy, [job("g3", gpus=4, workers=3)]), 0)
    assert d.admit == [] and d.waiting["g3"].code == "capacity"
    # Two 4-GPU workers fit, one per node.
    d = schedule(Snapshot(nodes, quotas, busy, [job("g2", gpus=4, workers=2)]), 0)
    assert d.admit == [("g2", {"n0": 1, "n1": 1})]


def test_gang_reason_when_free_gpus_are_scattered():
    nodes = [node(f"n{i}") for i in range(3)]
    quotas = {"a": Quota("a", 24, 0)}
    busy = [running(job(f"r{i}", gpus=5), {f"n{i}": 1}) for i in range(3)]
    d = schedule(Snapshot(nodes, quotas, busy, [job("g", gpus=4, workers=2)]), 0)
    assert d.waiting["g"].code == "gang"
    assert "scattered" in d.waiting["g"].message


def test_quota_limit_message_when_nothing_can_be_borrowed():
    nodes = [node("n0"), node("n1")]
    quotas = {"lab-a": Quota("lab-a", 8, 0), "lab-b": Quota("lab-b", 8, 0)}
    busy = [running(job("r", "lab-a", gpus=8), {"n0": 1})]
    d = schedule(Snapshot(nodes, quotas, busy, [job("p", "lab-a", gpus=4)]), 0)
    w = d.waiting["p"]
    assert w.code == "quota"
    assert "waiting for 4 GPUs; tenant lab-a uses 8 of its 8" in w.message
    assert "nothing can be borrowed" in w.message
    assert w.position == 1


def test_borrowing_idle_capacity_up_to_the_limit():
    nodes = [node(f"n{i}") for i in range(4)]
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 24, 0)}
    d = schedule(Snapshot(nodes, quotas, [], [job("p", gpus=8, workers=2)]), 0)
    assert len(d.admit) == 1  # 16 = 8 guaranteed + 8 borrowed of b's idle share
    d = schedule(Snapshot(nodes, quotas, [], [job("p", gpus=8, workers=3)]), 0)
    assert d.waiting["p"].code == "too_large_for_quota"
    assert "at most 16 (8 guaranteed + 8 borrowable)" in d.waiting["p"].message


def test_cpu_memory_and_job_count_limits():
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 8, 0, max_cpus=4, max_memory_mb=4000, max_jobs=1)}
    d = schedule(Snapshot(nodes, quotas, [], [job("c", cpus=8)]), 0)
    assert d.waiting["c"].code == "too_large_for_quota"
    busy = [running(job("r", cpus=1, mem=1000), {"n0": 1})]
    d = schedule(Snapshot(nodes, quotas, busy, [job("p", cpus=1, mem=1000)]), 0)
    assert d.waiting["p"].code == "quota" and "1 of its 1 jobs" in d.waiting["p"].message


def test_reclaim_preempts_borrowed_jobs_just_enough():
    nodes = [node("n0"), node("n1")]
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}
    b_jobs = [
        running(job("b-old", "b", gpus=4), {"n0": 1}, start=-300),
        running(job("b-mid", "b", gpus=4), {"n0": 1}, start=-200),
        running(job("b-new1", "b", gpus=4), {"n1": 1}, start=-100),
        running(job("b-new2", "b", gpus=4), {"n1": 1}, start=-50),
    ]
    d = schedule(Snapshot(nodes, quotas, b_jobs, [job("a1", "a", gpus=8)]), 0, IMMEDIATE)
    # b holds 16 with 8 guaranteed: its two most recent jobs are borrowed and reclaimed.
    assert sorted(j for j, _ in d.preempt) == ["b-new1", "b-new2"]
    assert d.admit == [("a1", {"n1": 1})]
    assert all("reclaimed" in why for _, why in d.preempt)
    # A 4-GPU job needs only one victim: the most recently started borrowed job.
    d = schedule(Snapshot(nodes, quotas, b_jobs, [job("a2", "a", gpus=4)]), 0, IMMEDIATE)
    assert [j for j, _ in d.preempt] == ["b-new2"]


def test_reclaim_guards_minimum_runtime_and_least_work_lost():
    nodes = [node("n0"), node("n1")]
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}

    def b_jobs(big_est=None):
        return [
            running(job("b-g1", "b", gpus=4, est=None), {"n0": 1}, start=-9000),  # guaranteed
            running(job("b-g2", "b", gpus=4, est=None), {"n0": 1}, start=-8000),
            running(job("b-big", "b", gpus=4, est=big_est), {"n1": 1}, start=-3000),  # borrowed
            running(job("b-young", "b", gpus=4, est=None), {"n1": 1}, start=-300),  # too young
        ]

    # By default nothing is reclaimed (the guarantee boost ranks the owner first instead).
    d = schedule(Snapshot(nodes, quotas, b_jobs(), [job("a1", "a", gpus=4, submit=-10**6)]), 0)
    assert d.preempt == [] and d.waiting["a1"].code == "capacity"
    # Reclaim after 4 h; defaults: 600 s runtime, work ratio 0.25, 1 h remaining.
    cfg = PolicyConfig(reclaim_after_wait_s=4 * 3600)

    def claim(waited):
        return schedule(Snapshot(nodes, quotas, b_jobs(), [job("a1", "a", gpus=4,
                                                                  submit=-waited)]), 0, cfg)

    # Waited less than 4 h: no reclaim (the guarantee boost gives it the next free GPUs).
    d = claim(14_399)
    assert d.preempt == [] and d.waiting["a1"].code == "capacity"
    # Waited 4 h with 4 GPUs (x 0.25 = 14,400 GPU-s): it takes the borrowed job that loses
    # least among those past the minimum runtime (b-big: 4 GPUs x 3,000 s); the 300 s old
    # borrowed job is spared, b's jobs within its guarantee too.
    d = claim(14_400)
    assert [j for j, _ in d.preempt] == ["b-big"]
    assert d.admit == [("a1", {"n1": 1})]
    # A borrowed job estimated to end within the hour is left to finish.
    d = schedule(Snapshot(nodes, quotas, b_jobs(big_est=3000 + 3599),
                          [job("a1", "a", gpus=4, submit=-14_400)]), 0, cfg)
    assert d.preempt == []
    # Work lost above a quarter of the claimant's GPU-time waited: not yet.
    older = [*b_jobs()[:2], running(job("b-big", "b", gpus=4, est=None), {"n1": 1}, start=-3601),
             b_jobs()[3]]
    d = schedule(Snapshot(nodes, quotas, older, [job("a1", "a", gpus=4, submit=-14_400)]), 0,
                 cfg)
    assert d.preempt == []


def test_no_reclaim_of_jobs_within_guarantee():
    nodes = [node("n0"), node("n1")]
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}
    busy = [running(job("b1", "b", gpus=8), {"n0": 1}), running(job("a0", "a", gpus=8),
                                                                  {"n1": 1})]
    d = schedule(Snapshot(nodes, quotas, busy, [job("a1", "a", gpus=4)]), 0)
    assert d.preempt == [] and d.admit == []
    assert d.waiting["a1"].code == "capacity"


def test_a_rounded_up_slice_lets_a_gang_wider_than_its_guarantee_reclaim_and_keeps_it():
    """``rounded_up_slice``: a tenant guaranteed 4 GPUs whose 16-GPU gang waits has its
    guarantee rounded up to 16, as the sharing incentive's private slice is. The gang then
    reclaims borrowed GPUs (without the option it waits for them, not within its
    guarantee), and once it runs it is not borrowed: a tenant under its own guarantee does
    not take it back."""
    nodes = [node("n0"), node("n1")]
    quotas = {"gang": Quota("gang", 4, 28), "flood": Quota("flood", 0, 32),
              "lab": Quota("lab", 4, 28)}
    flood = [running(job(f"f{i}", "flood", gpus=1), {f"n{i % 2}": 1}, start=-600 + i)
             for i in range(16)]
    wide = job("g16", "gang", gpus=8, workers=2)
    rounded = replace(IMMEDIATE, rounded_up_slice=True)

    d = schedule(Snapshot(nodes, quotas, flood, [wide]), 0, IMMEDIATE)
    assert d.admit == [] and d.preempt == []

    d = schedule(Snapshot(nodes, quotas, flood, [wide]), 0, rounded)
    assert d.admit == [("g16", {"n0": 1, "n1": 1})]
    # flood (guaranteed nothing) borrows all 16: two whole nodes take every one of them.
    assert len(d.preempt) == 16 and all("reclaimed" in why for _, why in d.preempt)

    gang_running = [running(wide, {"n0": 1, "n1": 1}, start=-600)]
    for cfg, taken in ((IMMEDIATE, True), (rounded, False)):
        d = schedule(Snapshot(nodes, quotas, gang_running, [job("l4", "lab", gpus=4)]), 0, cfg)
        assert bool(d.preempt) is taken, cfg.rounded_up_slice


def test_higher_priority_preempts_lower_priority_of_same_tenant():
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 8, 0)}
    busy = [running(job("low", gpus=8, prio=0), {"n0": 1}, start=-600)]
    d = schedule(Snapshot(nodes, quotas, busy, [job("hi", gpus=8, prio=5)]), 0)
    assert [j for j, _ in d.preempt] == ["low"]
    assert d.admit == [("hi", {"n0": 1})]
    # Not before the minimum runtime (600 s by default).
    young = [running(job("low", gpus=8, prio=0), {"n0": 1}, start=-599)]
    d = schedule(Snapshot(nodes, quotas, young, [job("hi", gpus=8, prio=5)]), 0)
    assert d.preempt == [] and d.admit == []
    # Preemption can be turned off.
    d = schedule(Snapshot(nodes, quotas, busy, [job("hi", gpus=8, prio=5)]), 0,
                 PolicyConfig(preemption=False))
    assert d.preempt == [] and d.admit == []


def test_a_running_entry_that_is_not_preemptible_is_never_a_victim():
    """A tenant's model endpoint replicas (scheduling.admission.services_entry): old enough
    and of a lower priority than the claimant, it is still never stopped for it."""
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 8, 0)}
    serving = replace(running(job("replicas", gpus=8, prio=0), {"n0": 1}, start=-10**6),
                      preemptible=False)
    d = schedule(Snapshot(nodes, quotas, [serving], [job("hi", gpus=8, prio=5)]), 0)
    assert d.preempt == [] and d.admit == []
    # The same entry, preemptible, is taken.
    d = schedule(Snapshot(nodes, quotas, [replace(serving, preemptible=True)],
                          [job("hi", gpus=8, prio=5)]), 0)
    assert [j for j, _ in d.preempt] == ["replicas"]


def _backfill_setup():
    nodes = [node("n0"), node("n1"), node("n2")]
    quotas = {"a": Quota("a", 24, 0), "b": Quota("b", 24, 0)}
    # n1 has 4 free until t=1000; n2 is fully busy for a long time; n0 is idle.
    busy = [
        running(job("r1", "b", gpus=4, est=1000), {"n1": 1}),
        running(job("r2", "b", gpus=8, est=10**6), {"n2": 1}),
    ]
    # The head has queued an hour: ahead of the smaller jobs submitted since, whose sizes
    # push them back by less than that.
    head = job("head", "a", gpus=8, workers=2, submit=-3600)
    return nodes, quotas, busy, head


def test_easy_backfill_short_job_runs_long_job_is_held():
    nodes, quotas, busy, head = _backfill_setup()
    pend = [head, job("short", "a", gpus=4, submit=1, est=500),
            job("long", "a", gpus=4, submit=2, est=50_000),
            job("noest", "a", gpus=4, submit=3, est=None)]
    d = schedule(Snapshot(nodes, quotas, busy, pend), 0)
    assert d.reservation is not None and d.reservation.job_id == "head"
    assert d.reservation.start == 1000
    admitted = dict(d.admit)
    assert "short" in admitted
    assert d.waiting["head"].estimated_start == 1000
    assert "reserved start in ~17 min" in d.waiting["head"].message
    for jid in ("long", "noest"):
        w = d.waiting[jid]
        assert w.code == "reserved_for_head"
        assert "held for the 16-GPU job ahead of it" in w.message
    assert "no runtime estimate" in d.waiting["noest"].message
    # noest counts as the median estimate (500 s), so it ranks ahead of the 50,000 s job.
    assert [d.waiting[j].position for j in ("head", "noest", "long")] == [1, 2, 3]


def test_backfill_may_use_resources_the_reservation_does_not_need():
    nodes, quotas, busy, head = _backfill_setup()
    nodes = [*nodes, node("n3")]  # a spare idle node the head job does not need
    pend = [head, job("long", "a", gpus=8, submit=2, est=None)]
    d = schedule(Snapshot(nodes, quotas, busy, pend), 0)
    # n0 + n3 are idle: the head itself fits now.
    assert dict(d.admit)["head"] == {"n0": 1, "n3": 1}
    # n3 busy for long, n4 has 4 GPUs free that the reservation (n0 + n1) does not need.
    busy2 = [*busy, running(job("r3", "b", gpus=8, est=10**6), {"n3": 1}),
             running(job("r4", "b", gpus=4, est=10**6), {"n4": 1})]
    nodes5 = [*nodes, node("n4")]
    pend = [head, job("long", "a", gpus=4, submit=2, est=None),
            job("long2", "a", gpus=4, submit=3, est=None)]
    d = schedule(Snapshot(nodes5, quotas, busy2, pend), 0)
    assert d.reservation is not None
    assert d.reservation.placement == {"n0": 1, "n1": 1}
    assert dict(d.admit) == {"long": {"n4": 1}}
    assert d.waiting["long2"].code == "reserved_for_head"


def test_no_backfill_config_blocks_behind_head():
    nodes, quotas, busy, head = _backfill_setup()
    # "short" ranks behind the head (submitted an hour later); it would fit now, but
    # without backfill nothing passes the head.
    pend = [head, job("short", "a", gpus=4, submit=1, est=500)]
    d = schedule(Snapshot(nodes, quotas, busy, pend), 0, PolicyConfig(backfill=False))
    assert d.admit == []
    assert d.waiting["short"].message


def test_too_large_for_cluster_reasons():
    nodes = [node("n0"), node("n1")]
    quotas = {"a": Quota("a", 100, 0)}
    pend = [job("w", gpus=16), job("t", gpus=8, workers=3), job("m", gpus=1, model="h100"),
            job("c", gpus=1, cpus=1000)]
    d = schedule(Snapshot(nodes, quotas, [], pend), 0)
    for jid in ("w", "t", "m", "c"):
        assert d.waiting[jid].code == "too_large_for_cluster", jid
        assert d.waiting[jid].message
    assert "largest: 8 GPUs" in d.waiting["w"].message
    assert "whole cluster has 16" in d.waiting["t"].message


def test_unknown_tenant_gets_a_plain_reason():
    d = schedule(Snapshot([node("n0")], {}, [], [job("x", "ghost")]), 0)
    assert d.waiting["x"].code == "too_large_for_quota"
    assert "ghost has no quota" in d.waiting["x"].message


def test_priority_then_fair_share_then_submit_time():
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 8, 0), "b": Quota("b", 8, 0)}
    busy = [running(job("fill", "a", gpus=8, est=None), {"n0": 1})]
    pend = [job("a1", "a", submit=0), job("b1", "b", submit=5), job("b0", "b", prio=1,
                                                                   submit=9)]
    snap = Snapshot(nodes, {**quotas, "a": Quota("a", 16, 0)}, busy, pend,
                    usage_history={"a": 1e6, "b": 0.0})
    d = schedule(snap, 0, PolicyConfig(preemption=False))
    order = sorted(d.waiting, key=lambda j: d.waiting[j].position)
    assert order == ["b0", "b1", "a1"]  # priority first; then the less served tenant b
    d = schedule(snap, 0, PolicyConfig(preemption=False, fair_share=False))
    order = sorted(d.waiting, key=lambda j: d.waiting[j].position)
    assert order == ["b0", "a1", "b1"]


def test_fair_share_weighs_what_a_tenant_received_against_what_it_was_entitled_to():
    # Both tenants are guaranteed the same, and a received four times b's GPUs over the
    # last day; but a received exactly its entitlement (it wanted GPUs while b wanted
    # few), whereas b received twice what it was entitled to. So a's job goes first:
    # GPUs a tenant took while nobody else wanted them are not held against it.
    day = 86_400.0
    quotas = {"a": Quota("a", 1, 0), "b": Quota("b", 1, 0)}
    pend = [job("b1", "b", submit=0), job("a1", "a", submit=0)]
    snap = Snapshot([node("n0", gpus=1)], quotas, [], pend,
                    usage_history={"a": 8 * day, "b": 2 * day},
                    entitled_history={"a": 8 * day, "b": 1 * day})
    d = schedule(snap, 0, PolicyConfig(preemption=False))
    assert [jid for jid, _ in d.admit] == ["a1"]
    # Without the entitlement (b was entitled to nothing) b is even further over it...
    d = schedule(replace(snap, entitled_history={"a": 8 * day}), 0, PolicyConfig(preemption=False))
    assert [jid for jid, _ in d.admit] == ["a1"]
    # ... and had b been entitled to what it received, the less-served b goes first.
    d = schedule(replace(snap, entitled_history={"a": 8 * day, "b": 2 * day}), 0,
                 PolicyConfig(preemption=False))
    assert [jid for jid, _ in d.admit] == ["b1"]


def test_entitled_history_is_the_decayed_max_min_share_of_demand():
    # 8 GPUs; a wants 8 from 0 to 3,600 s, b wants 8 from 1,800 s until now (7,200 s):
    # a is entitled to 8 GPUs, then 4 while both want them; b to 4, then 8.
    w, now = 86_400.0, 7_200.0
    quotas = {"a": Quota("a", 4, 4), "b": Quota("b", 4, 4)}

    def decayed(gpus, t0, t1):
        return gpus * w * (math.exp(-(now - t1) / w) - math.exp(-(now - t0) / w))

    got = entitled_history([("a", 8, 0, 3_600), ("b", 8, 1_800, 99_999)], quotas, 8, now, w)
    assert got["a"] == pytest.approx(decayed(8, 0, 1_800) + decayed(4, 1_800, 3_600))
    assert got["b"] == pytest.approx(decayed(4, 1_800, 3_600) + decayed(8, 3_600, 7_200))
    # Weights (weight x guaranteed GPUs) split contended GPUs...
    both = [("a", 8, 0, now), ("b", 8, 0, now)]
    got = entitled_history(both, {"a": Quota("a", 6, 2), "b": Quota("b", 2, 6)}, 8, now, w)
    assert got["a"] == pytest.approx(decayed(6, 0, now))
    assert got["b"] == pytest.approx(decayed(2, 0, now))
    # ... and a quota's limit caps the demand: b weighs 12 to a's 4 but may hold only 4.
    quotas = {"a": Quota("a", 4, 4), "b": Quota("b", 4, 0, weight=3.0)}
    got = entitled_history(both, quotas, 8, now, w)
    assert got["a"] == pytest.approx(decayed(4, 0, now))
    assert got["b"] == pytest.approx(decayed(4, 0, now))


def test_fair_share_interleaves_tenants_within_one_pass():
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 4, 4), "b": Quota("b", 4, 4)}
    pend = [job(f"a{i}", "a", submit=i) for i in range(8)] + [
        job(f"b{i}", "b", submit=100 + i) for i in range(8)]
    d = schedule(Snapshot(nodes, quotas, [], pend), 0)
    tenants = [jid[0] for jid, _ in d.admit]
    assert tenants.count("a") == 4 and tenants.count("b") == 4


def test_fifo_blocks_at_the_head():
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 16, 0)}
    busy = [running(job("r", gpus=4), {"n0": 1})]
    pend = [job("big", gpus=8, submit=0), job("small", gpus=1, submit=1, est=1)]
    d = schedule_fifo(Snapshot(nodes, quotas, busy, pend), 0)
    assert d.admit == []
    assert d.waiting["small"].code == "capacity" and "behind job big" in d.waiting["small"].message
    d = schedule(Snapshot(nodes, quotas, busy, pend), 0)
    assert [j for j, _ in d.admit] == ["small"]  # Gantry backfills it


def test_human_duration():
    assert human_duration(30) == "30 s"
    assert human_duration(45 * 60) == "45 min"
    assert human_duration(2 * 3600) == "2 h"
    assert human_duration(5 * 86400) == "5 d"


# --------------------------------------------------------------------------- properties

MODELS = ["", "", "", "a100"]


@st.composite
def scenarios(draw):
    n_nodes = draw(st.integers(1, 6))
    nodes = [
        Node(f"n{i}", draw(st.sampled_from([0, 2, 4, 8])), draw(st.sampled_from([8, 32, 64])),
             draw(st.sampled_from([32_000, 256_000])), draw(st.sampled_from(MODELS)))
        for i in range(n_nodes)
    ]
    tenants = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    quotas = {
        t: Quota(t, draw(st.integers(0, 16)), draw(st.integers(0, 16)),
                 max_cpus=draw(st.one_of(st.none(), st.sampled_from([16.0, 64.0]))),
                 max_jobs=draw(st.one_of(st.none(), st.integers(1, 6))),
                 weight=draw(st.sampled_from([0.5, 1.0, 2.0])))
        for t in tenants
    }

    def req(i: int, prefix: str) -> JobRequest:
        return JobRequest(
            f"{prefix}{i}", draw(st.sampled_from(tenants)), draw(st.integers(0, 2)),
            float(draw(st.integers(-1000, 0))), draw(st.integers(1, 3)),
            draw(st.sampled_from([0, 1, 1, 2, 4, 8, 12])), float(draw(st.sampled_from([1, 4, 16]))),
            draw(st.sampled_from([1000, 8000, 64_000])),
            draw(st.one_of(st.none(), st.floats(1, 5000))), draw(st.sampled_from(MODELS)))

    # Running jobs: placed first-fit within node capacity and tenant limits (a valid state).
    free = {n.name: [n.gpus, float(n.cpus), n.memory_mb, n.gpu_model] for n in nodes}
    used: dict[str, list[float]] = {t: [0, 0.0, 0] for t in tenants}
    run: list[RunningJob] = []
    for i in range(draw(st.integers(0, 8))):
        r = req(i, "r")
        q = quotas[r.tenant]
        u = used[r.tenant]
        if u[0] + r.total_gpus > q.max_gpus or (
            q.max_cpus is not None and u[1] + r.total_cpus > q.max_cpus) or (
            q.max_jobs is not None and u[2] + 1 > q.max_jobs):
            continue
        placement: dict[str, int] = {}
        trial = {k: list(v) for k, v in free.items()}
        for _ in range(r.workers):
            for name, f in trial.items():
                if (f[0] >= r.gpus_per_worker and f[1] >= r.cpus_per_worker
                        and f[2] >= r.memory_mb_per_worker
                        and (not r.gpu_model or f[3] == r.gpu_model)):
                    f[0] -= r.gpus_per_worker
                    f[1] -= r.cpus_per_worker
                    f[2] -= r.memory_mb_per_worker
                    placement[name] = placement.get(name, 0) + 1
                    break
            else:
                placement = {}
                break
        if not placement:
            continue
        free = trial
        u[0] += r.total_gpus
        u[1] += r.total_cpus
        u[2] += 1
        run.append(RunningJob(r, placement, float(draw(st.integers(-5000, 0))), False))
    pending = [req(i, "p") for i in range(draw(st.integers(0, 12)))]
    history = {t: float(draw(st.integers(0, 10**6))) for t in tenants}
    return Snapshot(nodes, quotas, run, pending, history)


def _fit_count(nodes, free, r: JobRequest) -> int:
    total = 0
    for n in nodes:
        if r.gpu_model and n.gpu_model != r.gpu_model:
            continue
        g, c, m = free[n.name]
        k = 10**9
        if r.gpus_per_worker:
            k = min(k, g // r.gpus_per_worker)
        if r.cpus_per_worker:
            k = min(k, int(c // r.cpus_per_worker + 1e-9))
        if r.memory_mb_per_worker:
            k = min(k, m // r.memory_mb_per_worker)
        total += max(k, 0)
    return total


def _free_after(nodes, jobs) -> dict[str, list[float]]:
    free = {n.name: [n.gpus, float(n.cpus), n.memory_mb] for n in nodes}
    for r, placement in jobs:
        for name, w in placement.items():
            f = free[name]
            f[0] -= w * r.gpus_per_worker
            f[1] -= w * r.cpus_per_worker
            f[2] -= w * r.memory_mb_per_worker
    return free


PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPS
@given(scenarios(), st.booleans())
def test_decision_invariants(snap: Snapshot, fifo: bool):
    now = 0.0
    d = (schedule_fifo if fifo else schedule)(snap, now)
    pend = {r.id: r for r in snap.pending}
    run = {rj.request.id: rj for rj in snap.running}
    nodes = {n.name: n for n in snap.nodes}

    # Every pending job is either admitted or waiting, exactly once.
    admitted = [j for j, _ in d.admit]
    assert len(admitted) == len(set(admitted))
    assert set(admitted) | set(d.waiting) == set(pend)
    assert not set(admitted) & set(d.waiting)

    # Waiting jobs: known code, non-empty message, positions 1..k.
    assert sorted(w.position for w in d.waiting.values()) == list(range(1, len(d.waiting) + 1))
    for w in d.waiting.values():
        assert w.code in WAIT_CODES
        assert w.message.strip()

    # Preemption: only running jobs, only when allowed.
    victims = [j for j, _ in d.preempt]
    assert len(victims) == len(set(victims)) and set(victims) <= set(run)
    if fifo:
        assert not victims
    tenant_used = {}
    for rj in snap.running:
        tenant_used[rj.request.tenant] = tenant_used.get(rj.request.tenant, 0) + (
            rj.request.total_gpus)
    max_admit_prio = max((pend[j].priority for j in admitted), default=-1)
    for v in victims:
        vr = run[v].request
        over = tenant_used[vr.tenant] > snap.quotas[vr.tenant].guaranteed_gpus
        assert over or vr.priority < max_admit_prio

    # Gangs: all workers placed, on existing nodes of the right model.
    for jid, placement in d.admit:
        r = pend[jid]
        assert sum(placement.values()) == r.workers
        for name, w in placement.items():
            assert w >= 1 and name in nodes
            assert not r.gpu_model or nodes[name].gpu_model == r.gpu_model

    # Node capacity after applying the decision.
    final = [(rj.request, rj.placement) for rj in snap.running if rj.request.id not in victims]
    final += [(pend[j], p) for j, p in d.admit]
    free = _free_after(snap.nodes, final)
    for f in free.values():
        assert f[0] >= 0 and f[1] >= -1e-6 and f[2] >= 0

    # Quotas after applying the decision: never above guaranteed + borrow limit, etc.
    usage: dict[str, list[float]] = {}
    for r, _ in final:
        u = usage.setdefault(r.tenant, [0, 0.0, 0, 0])
        u[0] += r.total_gpus
        u[1] += r.total_cpus
        u[2] += r.total_memory_mb
        u[3] += 1
    for t, (g, c, _m, n) in usage.items():
        q = snap.quotas[t]
        assert g <= q.guaranteed_gpus + q.borrow_limit_gpus
        assert q.max_cpus is None or c <= q.max_cpus + 1e-6
        assert q.max_jobs is None or n <= q.max_jobs

    # Jobs that can never run get too_large_* and only those.
    empty = _free_after(snap.nodes, [])
    for jid, r in pend.items():
        q = snap.quotas.get(r.tenant)
        never = (q is None or r.total_gpus > q.max_gpus
                 or (q.max_cpus is not None and r.total_cpus > q.max_cpus)
                 or _fit_count(snap.nodes, empty, r) < r.workers)
        if never:
            assert d.waiting[jid].code.startswith("too_large"), (jid, d.waiting.get(jid))
        elif jid in d.waiting:
            assert not d.waiting[jid].code.startswith("too_large"), d.waiting[jid]

    # Backfill never delays the head job's reservation.
    res = d.reservation
    if res is not None and res.start is not None:
        head = pend[res.job_id]
        assert res.job_id in d.waiting
        assert d.waiting[res.job_id].estimated_start == res.start
        ends = []
        for r, _p in final:
            if r.id in run:
                e = run[r.id].estimated_end
            else:
                e = None if r.estimated_duration is None else now + r.estimated_duration
            ends.append(None if e is None else max(e, now))
        still = [(r, p) for (r, p), e in zip(final, ends, strict=True)
                 if e is None or e > res.start]
        at_t = _free_after(snap.nodes, still)
        assert _fit_count(snap.nodes, at_t, head) >= head.workers
        for name, w in res.placement.items():
            f = at_t[name]
            assert f[0] >= w * head.gpus_per_worker
            assert f[1] >= w * head.cpus_per_worker - 1e-6
            assert f[2] >= w * head.memory_mb_per_worker


@PROPS
@given(scenarios())
def test_schedule_is_deterministic(snap: Snapshot):
    assert schedule(snap, 0.0) == schedule(snap, 0.0)


def test_a_wide_long_gang_yields_to_small_jobs_but_only_up_to_the_cap():
    # 8 busy nodes (64 GPUs). A 16-GPU gang with a 7-day timeout waits from t=0; its size
    # (0.5 x 7 d x (16^2 - 0.75) / 64 = 14 d) is capped at a day. Small jobs submitted
    # within that day rank ahead of it; one submitted after the day does not. A 1-GPU job
    # with the same 7-day timeout moves back only 0.5 x 7 d x 0.25 / 64 = 20 min.
    nodes8 = [node(f"n{i}") for i in range(8)]
    quotas = {"a": Quota("a", 64, 0)}
    busy = [running(job(f"r{i}", gpus=8, est=10**7), {f"n{i}": 1}) for i in range(8)]
    week = 7 * 86_400.0
    pending = [
        job("gang", gpus=8, workers=2, submit=0, est=week),
        job("small-early", gpus=1, submit=3_600, est=3_600),
        job("small-late", gpus=1, submit=86_400 + 60, est=60),
        job("long1", gpus=1, submit=100, est=week),
        job("short1", gpus=1, submit=200, est=900),
    ]
    d = schedule(Snapshot(nodes8, quotas, busy, pending), 90_000)
    assert d.admit == []
    order = sorted(d.waiting, key=lambda jid: d.waiting[jid].position)
    # Virtual times: short1 200 + 1.8 s, long1 100 + 1,181 s, small-early 3,600 + 7 s,
    # gang 0 + 86,400 s (capped), small-late 86,460 + 0.1 s.
    assert order == ["short1", "long1", "small-early", "gang", "small-late"]
    # Size-blind (size_weight=0), the same queue is in submit order.
    d = schedule(Snapshot(nodes8, quotas, busy, pending), 90_000, PolicyConfig(size_weight=0))
    order = sorted(d.waiting, key=lambda jid: d.waiting[jid].position)
    assert order == ["gang", "long1", "short1", "small-early", "small-late"]


def test_a_cpu_only_job_keeps_its_submit_time():
    # No GPUs, nothing to weigh: a CPU-only job with a week's timeout stays at its submit
    # time (10 s), neither moved back a day nor (as GPUs^2 - 0.75 < 0 would do) to the
    # front. The 1-GPU jobs on the one-GPU node move back 0.5 x timeout x 0.25: 7.5 s and
    # 112.5 s.
    nodes1 = [node("n0", gpus=1, cpus=2)]
    quotas = {"a": Quota("a", 1, 0)}
    busy = [running(job("r", gpus=1, cpus=2, est=10**7), {"n0": 1})]
    pending = [job("gpu-short", gpus=1, submit=0, est=60),
               job("cpu", gpus=0, submit=10, est=7 * 86_400),
               job("gpu-long", gpus=1, submit=5, est=900)]
    d = schedule(Snapshot(nodes1, quotas, busy, pending), 100)
    order = sorted(d.waiting, key=lambda jid: d.waiting[jid].position)
    assert order == ["gpu-short", "cpu", "gpu-long"]


def test_the_oldest_fifth_of_the_queue_goes_first_in_submit_order():
    # One free GPU, ten queued 1-GPU jobs: the oldest two (a fifth) are long, the rest short.
    # The size ranking alone would start a short one; the tail guard (off by default) starts
    # the oldest long job, and the waiting positions list the guarded jobs first, then the
    # rest by rank. (Issue 40: the guard orders what is ranked; a job that fits its tenant's
    # unused guarantee comes before it, by the tenant's own rank, so the guard is measured
    # here with that rule off, and the rule's own decision is checked after.)
    nodes = [node("n0", gpus=1)]
    quotas = {"a": Quota("a", 1, 0)}
    pending = [job("old1", submit=0, est=7 * 86_400), job("old2", submit=10, est=7 * 86_400)]
    pending += [job(f"new{i}", submit=100 + i, est=900 + 100 * i) for i in range(8)]
    ranked_only = PolicyConfig(fifo_tail_fraction=0.2, guarantees_before_rank=False)
    d = schedule(Snapshot(nodes, quotas, [], pending), 3600, ranked_only)
    assert d.admit == [("old1", {"n0": 1})]
    by_guarantee = schedule(Snapshot(nodes, quotas, [], pending), 3600,
                            PolicyConfig(fifo_tail_fraction=0.2))
    assert by_guarantee.admit == [("new0", {"n0": 1})]  # a's 1 guaranteed GPU, by a's rank
    order = sorted(d.waiting, key=lambda jid: d.waiting[jid].position)
    assert order == ["old2"] + [f"new{i}" for i in range(8)]
    # Without the guard the shortest job starts and the long ones wait at the back.
    d = schedule(Snapshot(nodes, quotas, [], pending), 3600, PolicyConfig(fifo_tail_fraction=0))
    assert d.admit == [("new0", {"n0": 1})]
    assert sorted(d.waiting, key=lambda jid: d.waiting[jid].position)[-2:] == ["old1", "old2"]


# --------------------------------------------------------------------------- guarantee first


def _guarantee_case(b_job: JobRequest) -> Snapshot:
    """Tenant a borrows the whole 8-GPU node but one GPU and has 9 old 1-GPU jobs queued
    (all in the tail guard); tenant b, guaranteed 2 GPUs and running none, queues one job
    submitted after all of them."""
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 2, 6), "b": Quota("b", 2, 6)}
    busy = [running(job(f"r{i}", "a", est=1e6), {"n0": 1}) for i in range(7)]
    pending = [job(f"a{i}", "a", submit=float(i), est=1e6) for i in range(9)] + [b_job]
    return Snapshot(nodes, quotas, busy, pending)


def test_guarantee_first_serves_a_tenant_below_its_guarantee_ahead_of_the_tail():
    snap = _guarantee_case(job("b0", "b", submit=100.0, est=1e6))
    # With the tail guard and without the rule the oldest job of the borrowing tenant takes
    # the last GPU (issue 28's order: guarantees_before_rank off) ...
    d = schedule(snap, 200.0, PolicyConfig(guarantee_first=False, fifo_tail_fraction=0.2,
                                           guarantees_before_rank=False))
    assert [a for a, _ in d.admit] == ["a0"]
    # ... issue 40's default rule starts b's job too: b is below its guarantee ...
    d = schedule(snap, 200.0, PolicyConfig(fifo_tail_fraction=0.2))
    assert [a for a, _ in d.admit] == ["b0"]
    # ... with it, tenant b's job, which fits in b's guarantee, starts first.
    d = schedule(snap, 200.0, PolicyConfig(guarantee_first=True, fifo_tail_fraction=0.2))
    assert [a for a, _ in d.admit] == ["b0"]
    assert d.preempt == []


def test_guarantee_first_leaves_a_job_that_does_not_fit_now_to_the_usual_order():
    # b's 2-GPU job is within its guarantee but does not fit in the one free GPU: it is
    # not pulled ahead (it would take the reservation ahead of the tail guard's jobs).
    snap = _guarantee_case(job("b0", "b", gpus=2, submit=100.0, est=1e6))
    d = schedule(snap, 200.0, PolicyConfig(guarantee_first=True, guarantees_before_rank=False))
    assert [a for a, _ in d.admit] == ["a0"]
    assert "b0" in d.waiting
    # Issue 40 changed this decision on purpose: with guarantees before ranking (the default)
    # b's job, within b's guarantee, holds the reservation and a's borrowed job may not take
    # the GPU it needs: a tenant below its guarantee is not held back by borrowed work.
    d = schedule(snap, 200.0, PolicyConfig(guarantee_first=True))
    assert d.admit == [] and d.reservation.job_id == "b0"
    assert d.waiting["a0"].code == "reserved_for_head"


def test_guarantee_first_stops_at_the_guarantee():
    # b has 3 jobs queued, guarantee 2: only 2 jump ahead; the third waits its turn behind
    # the tail guard's jobs.
    nodes = [node("n0")]
    quotas = {"a": Quota("a", 2, 6), "b": Quota("b", 2, 6)}
    pending = [job(f"a{i}", "a", submit=float(i), est=1e6) for i in range(9)]
    pending += [job(f"b{i}", "b", submit=100.0 + i, est=1e6) for i in range(3)]
    busy = [running(job(f"r{i}", "a", est=1e6), {"n0": 1}) for i in range(5)]
    d = schedule(Snapshot(nodes, quotas, busy, pending), 200.0,
                 PolicyConfig(guarantee_first=True, fifo_tail_fraction=0.2))
    assert [a for a, _ in d.admit] == ["b0", "b1", "a0"]
