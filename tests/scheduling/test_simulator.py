"""Tests of the trace simulator, metrics and trace loading (pure: no Django, no database)."""

from __future__ import annotations

import gzip
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import (
    Node,
    PolicyConfig,
    Quota,
    TraceError,
    TraceJob,
    jain_index,
    load_trace,
    load_vc_nodes,
    parse_trace,
    percentile,
    run_simulation,
    schedule,
    to_requests,
    water_fill,
    window,
)
from scheduling.policy.entitlement import entitled_history

TRACES = "/work/shared/traces"


def nodes(n: int, gpus: int = 8) -> list[Node]:
    return [Node(f"n{i}", gpus, 64, 512_000) for i in range(n)]


# --------------------------------------------------------------------------- metrics


def test_percentile_and_jain():
    assert percentile([], 95) == 0.0
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile(list(range(1, 101)), 95) == 95
    assert jain_index([1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)


def test_water_fill_is_weighted_max_min():
    a = water_fill(10, {"a": 100, "b": 100}, {"a": 1, "b": 3})
    assert a["a"] == pytest.approx(2.5) and a["b"] == pytest.approx(7.5)
    a = water_fill(10, {"a": 1, "b": 100}, {"a": 1, "b": 1})
    assert a["a"] == pytest.approx(1) and a["b"] == pytest.approx(9)
    a = water_fill(10, {"a": 2, "b": 3}, {"a": 1, "b": 1})
    assert a == {"a": 2, "b": 3}


def test_jain_counts_received_over_entitled_and_the_capped_index_forgives_only_excess():
    # One 2-GPU node, equal weights. a takes both GPUs at 0 for 100 s; b's 1-GPU job comes
    # at 10 and waits for it (nothing is preempted by default). Entitled: a both GPUs for
    # 0-10, then one of them until 100 (110 GPU-s, received 200); b one GPU from 10 until
    # its job ends at 110 (100 GPU-s, received 10).
    quotas = {"a": Quota("a", 1, 2), "b": Quota("b", 1, 2)}
    trace = [TraceJob("a0", 0, 100, 2, "a"), TraceJob("b0", 10, 10, 1, "b")]
    res = run_simulation(trace, [Node("n0", 2, 64, 512_000)], quotas, "gantry",
                         estimate="oracle")
    assert res["per_job"]["b0"]["finish"] == 110 and res["preemptions"] == 0
    ratios = {t: row["received_over_fair"] for t, row in res["tenants"].items()}
    assert ratios == {"a": pytest.approx(200 / 110, abs=1e-3), "b": pytest.approx(0.1)}
    assert res["jain_index"] == pytest.approx(jain_index([200 / 110, 0.1]), abs=1e-4)
    # a's excess over its entitlement no longer counts as unfairness; b's shortfall does.
    assert res["jain_index_capped"] == pytest.approx(jain_index([1.0, 0.1]), abs=1e-4)
    assert res["jain_index"] < res["jain_index_capped"] < 1.0


def test_to_requests_splits_large_jobs_into_gangs():
    jobs = [TraceJob("a", 0, 10, 16), TraceJob("b", 0, 10, 12), TraceJob("c", 0, 10, 3),
            TraceJob("d", 0, 10, 0)]
    reqs = {r.id: r for r, _ in to_requests(jobs, nodes(2))}
    assert (reqs["a"].workers, reqs["a"].gpus_per_worker) == (2, 8)
    assert (reqs["b"].workers, reqs["b"].gpus_per_worker) == (2, 6)
    assert (reqs["c"].workers, reqs["c"].gpus_per_worker) == (1, 3)
    assert reqs["d"].gpus_per_worker == 0
    user = {r.id: r for r, _ in to_requests(jobs, nodes(2), estimate="user")}
    assert all(r.estimated_duration >= 10 for r in user.values())
    none = to_requests(jobs, nodes(2), estimate="none")
    assert all(r.estimated_duration is None for r, _ in none)
    with pytest.raises(ValueError):
        to_requests(jobs, nodes(2), estimate="psychic")


# --------------------------------------------------------------------------- simulator


def test_preempted_jobs_requeue_and_finish():
    # Tenant b borrows the whole idle cluster; tenant a then reclaims its guaranteed half.
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}
    trace = [TraceJob(f"b{i}", 0, 5000, 4, "b") for i in range(4)]
    trace += [TraceJob("a0", 1000, 100, 8, "a")]
    immediate = PolicyConfig(min_runtime_before_preempt_s=0, reclaim_after_wait_s=0,
                             reclaim_work_ratio=float("inf"), reclaim_min_remaining_s=0)
    res = run_simulation(trace, nodes(2), quotas, "gantry", config=immediate)
    assert res["preemptions"] == 2
    assert res["completed"] == 5 and res["stuck"] == 0
    assert all(j["finish"] > 0 for j in res["per_job"].values())
    assert res["per_job"]["a0"]["finish"] == 1100
    preempted = [j for j in res["per_job"].values() if j["preemptions"]]
    assert len(preempted) == 2 and res["lost_gpu_hours"] > 0
    assert res["quota_violations"] == 0 and res["capacity_violations"] == 0
    assert res["per_job"]["b3"]["lost_s"] == 1000 and res["avg_wait_incl_lost_s"] > 0
    fifo = run_simulation(trace, nodes(2), quotas, "fifo")
    assert fifo["preemptions"] == 0 and fifo["per_job"]["a0"]["finish"] == 5100
    # With the default guards a0 has lost nothing by waiting when it arrives, so nothing is
    # thrown away: it starts when the borrowed jobs end.
    guarded = run_simulation(trace, nodes(2), quotas, "gantry")
    assert guarded["preemptions"] == 0 and guarded["per_job"]["a0"]["finish"] == 5100


def test_the_simulator_hands_the_policy_the_entitlement_live_admission_computes():
    # One 8-GPU node; a's 8-GPU job runs 0-1,800 s, b's arrives at 600 s and waits for it.
    # At each pass the simulator's decayed entitlement equals entitled_history (what live
    # admission computes from job records) over the same demand.
    quotas = {"a": Quota("a", 4, 4), "b": Quota("b", 4, 4)}
    trace = [TraceJob("a0", 0, 1_800, 8, "a"), TraceJob("b0", 600, 3_600, 8, "b")]
    seen = {}

    def policy(snap, now):
        seen[now] = dict(snap.entitled_history)
        return schedule(snap, now)

    res = run_simulation(trace, nodes(1), quotas, policy, estimate="oracle")
    assert res["per_job"]["b0"]["first_start"] == 1_800
    assert set(seen) >= {600.0, 1_800.0}
    for now, got in seen.items():
        demand = [("a", 8, 0, min(now, 1_800)), ("b", 8, 600, now)]
        want = entitled_history(demand, quotas, 8, now, 86_400.0)
        assert set(got) == {t for t, v in want.items() if v > 0}
        assert all(got[t] == pytest.approx(want[t]) for t in want)
    # While both wanted the node, each was entitled to half of it.
    assert seen[1_800.0]["b"] == pytest.approx(4 * 86_400 * (1 - math.exp(-1_200 / 86_400)))


def test_backfill_beats_fifo_on_head_of_line_blocking():
    quotas = {"a": Quota("a", 32, 0)}
    trace = [TraceJob("long", 0, 1000, 8, "a"), TraceJob("big", 1, 100, 16, "a")]
    trace += [TraceJob(f"s{i}", 2 + i, 50, 1, "a") for i in range(8)]
    g = run_simulation(trace, nodes(2), quotas, "gantry")
    f = run_simulation(trace, nodes(2), quotas, "fifo")
    assert g["completed"] == f["completed"] == 10
    assert g["avg_wait_s"] < f["avg_wait_s"]
    assert g["per_job"]["big"]["finish"] == f["per_job"]["big"]["finish"] == 1100


def test_unschedulable_jobs_are_reported_not_stuck():
    quotas = {"a": Quota("a", 8, 0)}
    trace = [TraceJob("ok", 0, 10, 4, "a"), TraceJob("huge", 0, 10, 64, "a"),
             TraceJob("ghost", 0, 10, 1, "nobody")]
    for policy in ("gantry", "fifo"):
        res = run_simulation(trace, nodes(1), quotas, policy)
        assert res["completed"] == 1 and res["unschedulable"] == 2 and res["stuck"] == 0


def test_tick_coalescing_and_estimate_models_run():
    quotas = {"a": Quota("a", 8, 8), "b": Quota("b", 8, 8)}
    trace = [TraceJob(str(i), i * 7.0, 30.0 + i, 1 + i % 8, "ab"[i % 2]) for i in range(40)]
    for est in ("oracle", "user", "none"):
        res = run_simulation(trace, nodes(2), quotas, "gantry", estimate=est, tick_s=60)
        assert res["completed"] == 40 and res["quota_violations"] == 0


@st.composite
def small_traces(draw):
    n_tenants = draw(st.integers(1, 3))
    tenants = [f"t{i}" for i in range(n_tenants)]
    quotas = {t: Quota(t, draw(st.sampled_from([0, 4, 8])), draw(st.sampled_from([0, 4, 8, 16])))
              for t in tenants}
    jobs = []
    for i in range(draw(st.integers(1, 20))):
        jobs.append(TraceJob(
            f"j{i}", float(draw(st.integers(0, 400))), float(draw(st.integers(1, 600))),
            draw(st.sampled_from([1, 1, 2, 4, 8, 12, 16])), draw(st.sampled_from(tenants)),
            draw(st.integers(0, 2))))
    return jobs, quotas, draw(st.integers(1, 3))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_traces(), st.sampled_from(["gantry", "fifo"]), st.sampled_from(["oracle", "none"]))
def test_simulation_invariants(case, policy, estimate):
    jobs, quotas, n_nodes = case
    res = run_simulation(jobs, nodes(n_nodes), quotas, policy, estimate=estimate)
    # Independent checks after every pass: never over quota, never over a node's capacity.
    assert res["quota_violations"] == 0
    assert res["capacity_violations"] == 0
    # Nothing is stuck: every job finishes (including preempted ones) or is unschedulable.
    assert res["stuck"] == 0
    assert res["completed"] + res["unschedulable"] == len(jobs)
    for j in res["per_job"].values():
        if j["preemptions"]:
            assert j["finish"] > 0
    if policy == "fifo":
        assert res["preemptions"] == 0
    assert 0.0 <= res["gpu_utilization"] <= 1.0 + 1e-9
    assert 0.0 < res["jain_index"] <= 1.0 + 1e-9


# --------------------------------------------------------------------------- traces


def test_parse_trace_reports_line_and_column():
    good = ["job_id,submit_time,duration,num_gpus,tenant", "1,5,10,2,a", "2,0,3,1,"]
    jobs = parse_trace(good)
    assert [j.job_id for j in jobs] == ["2", "1"]  # sorted by submit time
    assert jobs[0].tenant == "default"
    cases = [
        ("1,5,abc,2,a", 2, "duration", "not a number"),
        ("1,5,10,2.5,a", 2, "num_gpus", "whole number"),
        ("1,-1,10,2,a", 2, "submit_time", ">= 0"),
        ("1,5,0,2,a", 2, "duration", "> 0"),
        ("1,5,,2,a", 2, "duration", "missing"),
        (",5,1,2,a", 2, "job_id", "missing"),
    ]
    for row, line, column, words in cases:
        with pytest.raises(TraceError) as exc:
            parse_trace(["job_id,submit_time,duration,num_gpus,tenant", row], strict=True)
        assert exc.value.line == line and exc.value.column == column
        assert f"line {line}" in str(exc.value) and column in str(exc.value)
        assert words in str(exc.value)
        # Without strict the row is skipped and the reason recorded, not the file rejected.
        lenient = parse_trace(["job_id,submit_time,duration,num_gpus,tenant", row, "9,1,1,1,b"])
        assert [j.job_id for j in lenient] == ["9"]
        assert len(lenient.skipped) == 1 and lenient.skipped[0][0] == line
        assert column in lenient.skipped[0][1] and words in lenient.skipped[0][1]
    with pytest.raises(TraceError) as exc:
        parse_trace(["job_id,submit_time,duration,num_gpus", "1,0,1,1", "1,0,1,1"], strict=True)
    assert exc.value.line == 3 and "duplicate" in str(exc.value)
    with pytest.raises(TraceError) as exc:
        parse_trace(["job_id,submit_time,duration,num_gpus", "1,0,1"], strict=True)
    assert exc.value.line == 2 and "expected 4 fields" in str(exc.value)
    with pytest.raises(TraceError, match="missing required column"):
        parse_trace(["job_id,submit_time,num_gpus", "1,0,1"])
    with pytest.raises(TraceError, match="empty file"):
        parse_trace([])


def test_bad_rows_are_skipped_with_counts_and_requested_time_is_read():
    rows = ["job_id,submit_time,duration,num_gpus,tenant,requested_time",
            "a,0,10,1,x,3600", "b,1,0,1,x,", "c,2,0,2,y,", "a,3,5,1,x,", "d,4,5,1,y,",
            "e,5,5,1,y,-3"]
    jobs = parse_trace(rows)
    assert [j.job_id for j in jobs] == ["a", "d"]
    assert jobs[0].requested == 3600 and jobs[1].requested is None
    assert jobs.skip_counts == {
        "column 'duration': must be > 0, got 0": 2,
        "column 'job_id': duplicate job_id 'a' (first on line 2)": 1,
        "column 'requested_time': must be > 0, got -3": 1,
    }
    assert [line for line, _ in jobs.skipped] == [3, 4, 5, 7]


def test_censored_rows_are_skipped():
    rows = ["job_id,submit_time,duration,num_gpus,censored", "a,0,10,1,0", "b,1,,1,1"]
    assert [j.job_id for j in parse_trace(rows)] == ["a"]
    with pytest.raises(TraceError) as exc:
        parse_trace(rows, skip_censored=False, strict=True)
    assert exc.value.line == 3 and exc.value.column == "duration"


def test_tenants_can_come_from_another_column():
    """Alibaba's openb list has no tenant column: the bench takes its QoS class instead."""
    rows = ["job_id,submit_time,duration,num_gpus,qos,tenant", "a,0,10,1,LS,x", "b,1,5,1,,y"]
    assert [j.tenant for j in parse_trace(rows, tenant_column="qos")] == ["LS", "default"]
    assert [j.tenant for j in parse_trace(rows)] == ["x", "y"]


def test_load_trace_csv_and_gz(tmp_path):
    text = "job_id,submit_time,duration,num_gpus,tenant\n1,0,10,2,a\n2,4,5,1,b\n"
    plain = tmp_path / "t.csv"
    plain.write_text(text)
    packed = tmp_path / "t.csv.gz"
    with gzip.open(packed, "wt") as fh:
        fh.write(text)
    assert load_trace(plain) == load_trace(packed)
    bad = tmp_path / "bad.csv.gz"
    with gzip.open(bad, "wt") as fh:
        fh.write(text + "3,x,1,1,a\n")
    with pytest.raises(TraceError, match=r"bad\.csv\.gz, line 4, column 'submit_time'"):
        load_trace(bad, strict=True)
    assert len(load_trace(bad)) == 2 and load_trace(bad).skipped[0][0] == 4
    with pytest.raises(TraceError, match="file not found"):
        load_trace(tmp_path / "missing.csv")
    vc = tmp_path / "vc.csv"
    vc.write_text("vc,node num\nx,4\ny,2\n")
    assert load_vc_nodes(vc) == {"x": 4, "y": 2}
    vc.write_text("vc,node num\nx,four\n")
    with pytest.raises(TraceError, match="line 2, column 'node num'"):
        load_vc_nodes(vc)


@pytest.mark.skipif(not os.path.exists(f"{TRACES}/philly_vc.csv.gz"), reason="no shared traces")
def test_philly_window_smoke():
    trace = load_trace(f"{TRACES}/philly_vc.csv.gz")
    assert len(trace) == 82_247
    vc = load_vc_nodes(f"{TRACES}/philly_vc_nodes.csv")
    jobs = window(trace, 20_000, 400)
    assert jobs[0].submit_time == 0
    cl = nodes(8)
    total = sum(n.gpus for n in cl)
    quotas = {t: Quota(t, total * vc.get(t, 0) // sum(vc.values()), total // 2)
              for t in {j.tenant for j in jobs}}
    res = run_simulation(jobs, cl, quotas, "gantry")
    assert res["quota_violations"] == 0 and res["stuck"] == 0
    assert res["completed"] + res["unschedulable"] == 400
