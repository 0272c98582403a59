"""The scheduler's benchmark scripts still run: each on a tiny slice of the shared traces, as
a subprocess, writing its JSON. (The numbers are measured by `make bench`, not here; this
catches a script broken by a change elsewhere, as fairshare_used.py once was.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.scheduling.test_simulator import TRACES

ROOT = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], cwd=ROOT,
                          env={**os.environ, "GANTRY_TRACES": TRACES},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_simulate_writes_every_policy_and_goal(tmp_path):
    out = tmp_path / "scheduler.json"
    run_script("simulate.py", "--count", "300", "--nodes", "2", "--sweep-starts", "0,1000",
               "--sweep-count", "200", "--sweep-nodes", "2", "--alibaba-speedups", "20",
               "--micro-repeats", "1", "--processes", "1", "--out", str(out))
    res = json.loads(out.read_text())
    ref = res["reference_window"]
    for policy in ("fifo", "easy", "las", "before", "gantry", "fair_ceiling", "gantry_live"):
        assert ref[policy]["completed"] == 300, policy
    assert ref["fair_ceiling"]["lost_gpu_hours"] == 0  # perfect checkpoints
    assert [w["start"] for w in res["sweep"]["windows"]] == [0, 1000]
    sweep = res["sweep"]
    for key in ("windows_jain>=0.9", "windows_jain_capped>=0.9", "windows_jain>=easy"):
        assert set(sweep[key]) >= {"easy", "gantry", "fair_ceiling"}, key
    assert sweep["windows_jain>=easy"]["easy"] == 2  # EASY against itself
    # The sharing incentive (issue 40) beside today's columns, per policy and window.
    for policy in ("easy", "las", "gantry"):
        assert set(sweep["sharing_incentive"][policy]) >= {"share_rho<=1", "max_rho"}
        assert res["alibaba"]["sharing_incentive"][policy]["tenant_windows_judged"] > 0
    assert all(rho > 0 for rho, _ in sweep["windows"][0]["easy"]["rho"].values())
    assert ref["gantry"]["sharing"] and "guarantee_fit_p95_wait_s" in ref["gantry"]["fairness"]
    for w in sweep["windows"]:
        assert 0 < w["gantry"]["jain_index_capped"] <= 1.0 + 1e-9
    assert res["alibaba"]["runs"][0]["gantry"]["completed"] == 448
    assert res["schedule_micro_benchmark"]["trace_shaped"]["running"] == 4000
    assert res["entitled_history_benchmark"]["intervals"] == 34_000
    assert (tmp_path / "scheduler.jobs.csv.gz").stat().st_size > 0


def test_fairshare_used_checkpoint_sim_and_the_pass_timing_run(tmp_path):
    run_script("scheduler_micro.py", "--repeats", "1", "--out", str(tmp_path / "pass.json"))
    res = json.loads((tmp_path / "pass.json").read_text())
    assert res["schedule_micro_benchmark"]["full_cluster"]["pending"] == 10_000
    assert "current_over_baseline" in res["schedule_micro_benchmark"]["trace_shaped"]
    run_script("fairshare_used.py", "--count", "200", "--out", str(tmp_path / "fu.json"))
    res = json.loads((tmp_path / "fu.json").read_text())
    assert res["traces"]["philly"]["allocated"]["completed"] == 200
    assert res["traces"]["philly"]["used"]["completed"] == 200
    run_script("checkpoint_sim.py", "--count", "200", "--nodes", "2",
               "--out", str(tmp_path / "cs.json"))
    res = json.loads((tmp_path / "cs.json").read_text())
    rows = res["traces"]["philly"]["every_min"]["10.0"]
    assert {"no_preemption", "current", "checkpoint_aware"} <= set(rows)
    assert rows["no_preemption"]["lost_gpu_hours"] == 0


def test_the_decision_recorder_writes_one_line_per_pass(tmp_path):
    """bench/scheduler_decisions.py, which proves a refactor of the pass decides the same."""
    out = tmp_path / "decisions.txt"
    run_script("scheduler_decisions.py", "--count", "30", "--starts", "0", "--random", "5",
               "--cases", "philly,random", "--out", str(out))
    lines = out.read_text().splitlines()
    assert {line.split()[0] for line in lines} >= {"philly0/live", "random/easy"}
    assert all(len(line.split()[-1]) == 64 for line in lines)


def test_the_fairness_sweep_reports_every_goal_per_trace_and_configuration(tmp_path):
    """bench/scheduler_fairness.py (issue 40) on one tiny window of each trace."""
    out = tmp_path / "fairness.json"
    run_script("scheduler_fairness.py", "--philly-starts", "0", "--count", "150", "--nodes", "2",
               "--alibaba-speedups", "20", "--synthetic-seeds", "0", "--synthetic-loads", "1.1,0.7",
               "--reclaims", "900",
               "--las-scales", "1", "--size-weights", "0.5", "--procs", "2",
               "--out", str(out))
    res = json.loads(out.read_text())
    assert set(res["traces"]) == {"philly", "alibaba", "synthetic", "synthetic_load0.7"}
    for trace in res["traces"].values():
        summary = trace["summary"]
        swept = {"W900_las1_size0.5", "W900_las1_size0.5_rounded",
                 "W900_las1_size0.5_gf", "W900_las1_size0.5_gf_rounded"}
        assert set(summary) == {"easy", "las", *swept, "W900_no_checkpoints",
                                "defaults", "issue28_defaults"}
        assert summary["easy"]["geo_jct_over_easy"] == 1.0  # EASY against itself
        goals = summary["W900_las1_size0.5"]["goals"]
        assert set(goals) >= {"rho", "geo_jct<=las", "geo_p95<=las", "windows<=1.10easy",
                              "guarantee_fit_p95<=promise"}
        # The frontier: every configuration, best rho share first, beside its efficiency.
        shares = [row["share_rho<=1"] for row in trace["frontier"]]
        assert len(shares) == len(summary) - 2 and shares == sorted(shares, reverse=True)
        assert set(trace["configs_meeting"]["rho"]) <= set(summary) - {"easy", "las"}
    assert res["setup"]["philly_window_starts"] == [0]
