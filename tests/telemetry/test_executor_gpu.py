"""The executor samples the GPUs it was given through NVML and ships them as metrics.

The GPUs here are the fake NVML library (conftest.py: it stands in for hardware) loaded
through the real binding by a real `python -m executor` process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.executor.fakeserver import FakeGantry
from tests.executor.test_executor import (
    PY,
    REPO_ROOT,
    child_env,
    finish,
    script,
)

pytestmark = pytest.mark.xdist_group("fake_nvml")


@pytest.fixture
def server():
    fake = FakeGantry().start()
    yield fake
    fake.stop()


def run_executor(server: FakeGantry, workdir: Path, env: dict[str, str], *flags: str):
    """`python [flags] -m executor` for the fake server's job, with `env` added."""
    cmd = [PY, *flags, "-m", "executor", "--api-url", server.url, "--job", str(server.job)]
    cmd += ["--worker", "0", "--workdir", str(workdir), "--final-flush-seconds", "20"]
    env = child_env(
        {"GANTRY_JOB_TOKEN": server.token, "GANTRY_CACHE_DIR": str(workdir / "c"), **env}
    )
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return finish(proc)


def fast(fake_nvml) -> dict[str, str]:
    """The fake NVML on the loader's path and a sample every 0.1 s."""
    return {"LD_LIBRARY_PATH": str(fake_nvml.directory), "GANTRY_GPU_SAMPLE_SECONDS": "0.1"}


def gpu_points(server: FakeGantry) -> list[dict]:
    return [m for m in server.ordered_metrics() if m["name"].startswith("gpu")]


def test_executor_samples_the_gpus_it_was_given(
    server: FakeGantry, tmp_path: Path, fake_nvml, monkeypatch
) -> None:
    # Host GPUs 0 and 1 busy at 20% and 90%; the job is given host GPU 1, by UUID.
    fake_nvml.set((20, 1000, 100000, 40), (90, 4096, 250500, 71))
    server.spec["env"] = {"CUDA_VISIBLE_DEVICES": "GPU-fa4e0000-0000-0000-0000-000000000001"}
    server.spec["command"] = script(
        tmp_path,
        """
        import time
        from executor import log_metric
        log_metric("loss", 0.5, step=1)
        time.sleep(1.0)
        """,
    )
    code, err = run_executor(server, tmp_path, fast(fake_nvml))
    assert code == 0, err
    points = gpu_points(server)
    names = {p["name"] for p in points}
    assert names == {
        "gpu0/utilization",
        "gpu0/memory_used_mb",
        "gpu0/power_w",
        "gpu0/temperature_c",
    }, names
    by_name = {p["name"]: p["value"] for p in points}
    assert by_name == {
        "gpu0/utilization": 90,
        "gpu0/memory_used_mb": 4096,
        "gpu0/power_w": 250.5,
        "gpu0/temperature_c": 71,
    }
    assert sum(p["name"] == "gpu0/utilization" for p in points) >= 3  # every 0.1 s for 1 s
    assert all(p["step"] is None and isinstance(p["ts"], float) for p in points)
    # The training metric arrives beside them, in the same stream.
    assert [m["name"] for m in server.ordered_metrics() if m["name"] == "loss"] == ["loss"]
    assert "GPU telemetry: sampling 1 GPU(s)" in err


def test_a_cpu_job_samples_nothing(server: FakeGantry, tmp_path: Path, fake_nvml, monkeypatch):
    fake_nvml.set((50, 1000, 100000, 40))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    server.spec["env"] = {"CUDA_VISIBLE_DEVICES": ""}
    server.spec["command"] = script(tmp_path, "import time; time.sleep(0.5)")
    code, err = run_executor(server, tmp_path, fast(fake_nvml))
    assert code == 0, err
    assert gpu_points(server) == []


def test_executor_without_nvml_still_runs(server: FakeGantry, tmp_path: Path, monkeypatch):
    """The standard-library install: `python -S` sees no site-packages, so no pynvml (and no
    library either); a GPU job runs, reports and samples nothing, without an error."""
    server.spec["env"] = {"CUDA_VISIBLE_DEVICES": "0"}
    server.spec["command"] = script(
        tmp_path,
        """
        import time
        from executor import log_metric
        log_metric("loss", 0.25)
        time.sleep(0.5)
        """,
    )
    probe = subprocess.run([PY, "-S", "-c", "import pynvml"], capture_output=True)
    assert probe.returncode != 0, "pynvml must not be importable in the stdlib-only run"
    code, err = run_executor(server, tmp_path, {"GANTRY_GPU_SAMPLE_SECONDS": "0.1"}, "-S")
    assert code == 0, err
    assert [m["name"] for m in server.ordered_metrics()] == ["loss"]
    assert server.final_status()["outcome"] == "succeeded"  # type: ignore[index]
    assert "Traceback" not in err


def test_the_jobs_own_gpu_memory_is_counted_where_nvml_lists_processes(
    server: FakeGantry, tmp_path: Path, fake_nvml
) -> None:
    """NVML lists the GPU's processes: the job's (its command's process group) are summed,
    another process on the same GPU is not."""
    fake_nvml.set((60, 9000, 200000, 65))
    server.spec["env"] = {"CUDA_VISIBLE_DEVICES": "0"}
    server.spec["command"] = script(
        tmp_path,
        f"""
        import os, time
        # The job "allocates" 1500 MiB on the GPU; pid 1 holds 7000 MiB beside it.
        with open({str(fake_nvml.script)!r}, "w") as fh:
            fh.write(f"60 9000 200000 65 {{os.getpid()}}:1500 1:7000\\n")
        time.sleep(3.0)  # samples every 0.1 s: 1 s was missed once on a loaded CI machine
        """,
    )
    code, err = run_executor(server, tmp_path, fast(fake_nvml))
    assert code == 0, err
    job_memory = [p["value"] for p in gpu_points(server) if p["name"] == "gpu0/job_memory_mb"]
    assert job_memory and set(job_memory) == {1500}
    device = {p["value"] for p in gpu_points(server) if p["name"] == "gpu0/memory_used_mb"}
    assert device == {9000}
