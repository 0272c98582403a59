"""The sharing incentive (issue 40): rho per tenant against a private slice of its
guarantee, the guarantee-fit wait, and their window and trace summaries. Hand-computed
small cases (pure: no Django, no database)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling import (
    JobRequest,
    Node,
    PolicyConfig,
    Quota,
    RunningJob,
    Snapshot,
    TraceJob,
    run_simulation,
    schedule,
)
from scheduling.sim_metrics import slice_gpus, slice_nodes, trace_fairness, window_fairness
from scheduling.simulator import private_slices
from scheduling.traces import synthetic_trace

EIGHT = Node("shape", 8, 64, 512_000)


def tj(jid: str, tenant: str, gpus: int = 1, submit: float = 0.0, dur: float = 100.0):
    return TraceJob(jid, submit, dur, gpus, tenant)


def test_the_slice_is_the_guarantee_rounded_up_to_the_widest_job():
    assert slice_gpus(12, [(1, 1), (1, 8)], EIGHT) == 12  # an 8-GPU job fits on 8 + 4
    assert slice_gpus(2, [(1, 1), (1, 4)], EIGHT) == 4  # wider than the slice: rounded up
    # 12 GPUs as 2 workers x 6 do not fit on nodes of 8 + 4: two whole nodes.
    assert slice_gpus(12, [(2, 6)], EIGHT) == 16
    assert slice_gpus(0, [(1, 1)], EIGHT) == 0  # best effort: promised no slice
    assert [n.gpus for n in slice_nodes(12, EIGHT)] == [8, 4]
    assert slice_nodes(12, EIGHT)[1].cpus == 32  # CPUs in proportion to GPUs


def test_rho_compares_the_shared_jct_with_the_private_slice_by_hand():
    # One 2-GPU node; a and b each guaranteed 1 GPU and may borrow 1. At 0, a submits two
    # 100 s jobs and b one. EASY (submit order, then id) starts a1 and a2: a borrows b's GPU.
    # Shared: a's JCTs 100, 100 (avg 100); b1 starts at 100, JCT 200.
    # Private: a alone on 1 GPU runs a1 then a2, JCTs 100 and 200 (avg 150); b1: 100.
    # rho(a) = 100 / 150, rho(b) = 200 / 100.
    jobs = [tj("a1", "a"), tj("a2", "a"), tj("b1", "b")]
    nodes = [Node("n0", 2, 16, 128_000)]
    quotas = {"a": Quota("a", 1, 1), "b": Quota("b", 1, 1)}
    res = run_simulation(jobs, nodes, quotas, "easy", estimate="oracle", private=True)
    a, b = res["sharing"]["a"], res["sharing"]["b"]
    assert (a["avg_jct_shared_s"], a["avg_jct_private_s"]) == (100.0, 150.0)
    assert a["rho"] == pytest.approx(2 / 3, abs=1e-4)
    assert (b["avg_jct_shared_s"], b["avg_jct_private_s"], b["rho"]) == (200.0, 100.0, 2.0)
    assert a["slice_gpus"] == b["slice_gpus"] == 1


def test_private_slices_run_wider_jobs_on_the_slice_rounded_up():
    # a is guaranteed 1 GPU but submits a 2-GPU job: its slice is 2 GPUs, the job runs at 0.
    jobs = [tj("a1", "a", gpus=2, dur=50), tj("c1", "c", dur=10)]
    quotas = {"a": Quota("a", 1, 1), "c": Quota("c", 0, 2)}
    slices = private_slices(jobs, [Node("n0", 2, 16, 128_000)], quotas, estimate="oracle")
    assert slices["a"] == {"slice_gpus": 2, "jct": {"a1": 50.0}}
    assert slices["c"] == {"slice_gpus": 0, "jct": {}}  # best effort: no rho
    res = run_simulation(
        jobs, [Node("n0", 2, 16, 128_000)], quotas, "easy", estimate="oracle", private=slices
    )
    assert res["sharing"]["c"]["rho"] is None


def test_guarantee_fit_wait_counts_jobs_that_fit_the_unused_guarantee_at_submit():
    # As above: a1 fits a's guarantee of 1; a2 does not (a1 already asks for it); b1 fits
    # b's. Under EASY b1 waits 100 s behind a's borrowed a2: the broken promise this measures.
    jobs = [tj("a1", "a"), tj("a2", "a"), tj("b1", "b")]
    nodes = [Node("n0", 2, 16, 128_000)]
    quotas = {"a": Quota("a", 1, 1), "b": Quota("b", 1, 1)}
    fair = run_simulation(jobs, nodes, quotas, "easy", estimate="oracle", private=True)["fairness"]
    assert fair["guarantee_fit_jobs"] == 2
    assert fair["guarantee_fit_p50_wait_s"] == 0.0
    assert fair["guarantee_fit_p95_wait_s"] == fair["guarantee_fit_max_wait_s"] == 100.0


def test_window_and_trace_summaries_judge_tenants_with_enough_jobs():
    ratios = {
        "a": {"rho": 0.5, "jobs": 10},
        "b": {"rho": 1.2, "jobs": 12},
        "c": {"rho": 9.0, "jobs": 9},  # too few jobs to judge
        "d": {"rho": None, "jobs": 40},  # best effort
    }
    w = window_fairness(ratios, [0.0, 0.0, 30.0])
    assert (w["tenants_judged"], w["tenants_rho<=1"], w["max_rho"]) == (2, 1, 1.2)
    assert w["guarantee_fit_p95_wait_s"] == 30.0
    t = trace_fairness([w, window_fairness({"a": {"rho": 0.9, "jobs": 10}}, [])])
    assert (t["tenant_windows_judged"], t["tenant_windows_rho<=1"]) == (3, 2)
    assert t["max_rho"] == 1.2
    assert t["rho_goals_met"] is False  # 2 of 3 is below 95%
    many = [window_fairness({"a": {"rho": 0.99, "jobs": 10}}, [])] * 19
    high = window_fairness({"a": {"rho": 1.4, "jobs": 10}}, [])
    assert trace_fairness([*many, high])["rho_goals_met"] is True  # 95%, none above 1.5
    worse = window_fairness({"a": {"rho": 1.6, "jobs": 10}}, [])
    assert trace_fairness([*many * 2, worse])["rho_goals_met"] is False  # above 1.5


def test_the_synthetic_trace_has_the_held_out_shape_and_is_seeded():
    jobs, quotas = synthetic_trace(1000, seed=3)
    assert jobs == synthetic_trace(1000, seed=3)[0]  # deterministic
    assert jobs != synthetic_trace(1000, seed=4)[0]
    assert len(jobs) == 1000 and len(quotas) == 18 and jobs[0].submit_time == 0.0
    flood = [j for j in jobs if j.tenant == "flood"]
    gangs = [j for j in jobs if j.tenant.startswith("gang-") and j.num_gpus >= 8]
    assert all(j.num_gpus == 1 for j in flood) and len(flood) > 500
    assert 20 <= len(gangs) <= 120 and {j.num_gpus for j in gangs} == {8, 16}
    assert sorted({q.guaranteed_gpus for q in quotas.values()}) == [0, 2, 8, 16]
    assert sum(q.guaranteed_gpus for q in quotas.values()) <= 64
    # Bursts: the flood's median gap between arrivals is far below its average gap.
    gaps = sorted(b.submit_time - a.submit_time for a, b in zip(flood, flood[1:], strict=False))
    span = flood[-1].submit_time - flood[0].submit_time
    assert gaps[len(gaps) // 2] < 0.2 * span / len(gaps)


# --------------------------------------------------------------------------- guarantees first


def _req(jid, tenant, gpus=1, submit=0.0, est=3600.0):
    return JobRequest(jid, tenant, 0, submit, 1, gpus, gpus, 1000 * gpus, est)


def _flood_case(running_flood: int) -> tuple[list[Node], dict[str, Quota], list, list]:
    """Two 8-GPU nodes. ``flood`` (8 guaranteed, may borrow 8) runs ``running_flood`` 1-GPU
    jobs (node n0 first, r<i> started at i s) and has 40 more queued; ``small`` (8 guaranteed) runs nothing and
    queues one 8-GPU job of 4 h, submitted after the whole flood."""
    nodes = [Node("n0", 8, 64, 512_000), Node("n1", 8, 64, 512_000)]
    quotas = {"flood": Quota("flood", 8, 8), "small": Quota("small", 8, 8)}
    busy = [
        RunningJob(_req(f"r{i}", "flood"), {"n0" if i < 8 else "n1": 1}, float(i))
        for i in range(running_flood)
    ]
    pending = [_req(f"f{i}", "flood", submit=float(i)) for i in range(40)]
    pending.append(_req("wide", "small", gpus=8, submit=50.0, est=4 * 3600.0))
    return nodes, quotas, busy, pending


def test_a_tenant_under_its_guarantee_starts_its_gang_before_another_tenants_flood():
    # 12 GPUs free. Issue 28's ranking pushes the 8-GPU job back by its size (about 8 h)
    # and lets the flood's 1-GPU jobs take the free GPUs, borrowing: the gang waits.
    nodes, quotas, busy, pending = _flood_case(running_flood=4)
    snap = Snapshot(nodes, quotas, busy, pending)
    old = schedule(snap, 60.0, PolicyConfig(guarantees_before_rank=False))
    assert "wide" in old.waiting and len(old.admit) == 12
    # Guarantees before ranking: small is below its guarantee and its job fits it, so it
    # starts first, on the empty node; the flood gets its own guarantee's 4 GPUs beside.
    d = schedule(snap, 60.0)
    assert d.admit[0] == ("wide", {"n1": 1})
    assert [jid for jid, _ in d.admit[1:]] == ["f0", "f1", "f2", "f3"]
    assert d.waiting["f4"].position == 1  # why pending, in order, for the rest
    assert "GPU" in d.waiting["f4"].message


def test_a_full_cluster_of_borrowed_work_is_reclaimed_for_the_guarantee_after_the_window():
    # The flood holds all 16 GPUs (8 borrowed). Before the reclaim window the gang holds the
    # reservation, so no more borrowed work starts in front of it; after it, it reclaims
    # one node's worth of the flood's borrowed jobs.
    nodes, quotas, busy, pending = _flood_case(running_flood=16)
    cfg = PolicyConfig(
        reclaim_after_wait_s=900.0,
        reclaim_work_ratio=float("inf"),
        reclaim_min_remaining_s=0.0,
        min_runtime_before_preempt_s=0.0,
    )
    early = schedule(Snapshot(nodes, quotas, busy, pending), 500.0, cfg)
    assert early.admit == [] and early.preempt == []
    assert early.reservation.job_id == "wide"
    late = schedule(Snapshot(nodes, quotas, busy, pending), 50.0 + 900.0, cfg)
    assert late.admit == [("wide", {"n1": 1})]
    victims = {jid for jid, _ in late.preempt}
    assert victims == {f"r{i}" for i in range(8, 16)}  # the borrowed ones, on n1
    assert all("reclaimed" in why for _, why in late.preempt)


def test_borrowed_work_goes_least_attained_service_first():
    # a is over its guarantee; of its two queued 1-GPU jobs the older one already received
    # 2 GPU-hours before a preemption (LAS level 1): the fresh one takes the free GPU.
    nodes = [Node("n0", 2, 16, 128_000)]
    quotas = {"a": Quota("a", 1, 1)}
    busy = [RunningJob(_req("r0", "a"), {"n0": 1}, 0.0)]
    pending = [_req("old", "a", submit=0.0), _req("new", "a", submit=100.0)]
    snap = Snapshot(nodes, quotas, busy, pending, attained={"old": 7200.0})
    assert [jid for jid, _ in schedule(snap, 200.0).admit] == ["new"]
    assert [jid for jid, _ in schedule(replace(snap, attained={}), 200.0).admit] == ["old"]


def test_las_preemption_takes_borrowed_work_with_more_service():
    # b borrows the only GPU for 3 GPU-hours; a, beyond its (zero) guarantee, queues a job:
    # with las_preempt_borrowed it preempts b's job, which has received more.
    nodes = [Node("n0", 1, 8, 64_000)]
    quotas = {"a": Quota("a", 0, 1), "b": Quota("b", 0, 1)}
    busy = [RunningJob(_req("b0", "b"), {"n0": 1}, 0.0)]
    snap = Snapshot(nodes, quotas, busy, [_req("a0", "a", submit=10_800.0)])
    cfg = PolicyConfig(las_preempt_borrowed=True)
    d = schedule(snap, 10_800.0, cfg)
    assert d.admit == [("a0", {"n0": 1})] and [v for v, _ in d.preempt] == ["b0"]
    assert schedule(snap, 10_800.0).preempt == []  # off by default
    young = schedule(snap, 600.0 + 10.0, cfg)  # b0 has 0.17 GPU-hours: same level
    assert young.preempt == []


def test_with_las_preemption_a_tenants_most_served_job_is_the_borrowed_one():
    # b is guaranteed 1 GPU and runs two: "old" for 3 h (3 GPU-hours, level 1) and "young"
    # for 800 s (level 0). Its guarantee covers the least-served job, so "old" is the
    # borrowed one and a's fresh job (level 0) takes its GPU. Filled by start time, as
    # without LAS, "old" held the guarantee and the borrowed "young" was at a's level.
    nodes = [Node("n0", 2, 16, 128_000)]
    quotas = {"a": Quota("a", 0, 1), "b": Quota("b", 1, 1)}
    busy = [RunningJob(_req("old", "b"), {"n0": 1}, 0.0),
            RunningJob(_req("young", "b"), {"n0": 1}, 10_000.0)]
    snap = Snapshot(nodes, quotas, busy, [_req("a0", "a", submit=10_700.0)])
    d = schedule(snap, 10_800.0, PolicyConfig(las_preempt_borrowed=True))
    assert d.admit == [("a0", {"n0": 1})] and [v for v, _ in d.preempt] == ["old"]
    assert schedule(snap, 10_800.0).preempt == []  # no LAS preemption: no victim


def test_las_preemption_takes_the_most_served_job_first():
    # b borrows both GPUs: "long" has 11 GPU-hours (level 2), "mid" 1.4 (level 1). a's
    # fresh job needs one GPU: LAS takes it from "long", though "mid" has run for less and
    # would lose less (the checkpoint-aware order without LAS preemption).
    nodes = [Node("n0", 2, 16, 128_000)]
    quotas = {"a": Quota("a", 0, 1), "b": Quota("b", 0, 2)}
    busy = [RunningJob(_req("long", "b"), {"n0": 1}, 0.0),
            RunningJob(_req("mid", "b"), {"n0": 1}, 35_000.0)]
    snap = Snapshot(nodes, quotas, busy, [_req("a0", "a", submit=40_000.0)])
    cfg = PolicyConfig(las_preempt_borrowed=True, checkpoint_aware=True,
                       min_runtime_before_preempt_s=0.0)
    d = schedule(snap, 40_000.0, cfg)
    assert d.admit == [("a0", {"n0": 1})] and [v for v, _ in d.preempt] == ["long"]


def test_a_tenant_running_nothing_has_its_wide_job_counted_as_within_its_guarantee():
    # small is guaranteed 2 GPUs but runs nothing and queues one 8-GPU job: as its private
    # slice is rounded up to that job, the job comes before the flood's borrowed work.
    nodes, quotas, busy, pending = _flood_case(running_flood=4)
    quotas["small"] = Quota("small", 2, 8)
    d = schedule(Snapshot(nodes, quotas, busy, pending), 60.0)
    assert d.admit[0] == ("wide", {"n1": 1})
    # Once it runs something, a second wide job is borrowed work and waits its rank.
    busy.append(RunningJob(_req("s0", "small"), {"n0": 1}, 0.0))
    d = schedule(Snapshot(nodes, quotas, busy, pending), 60.0)
    assert "wide" in d.waiting
