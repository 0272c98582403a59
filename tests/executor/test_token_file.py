"""The executor reads its token from a mounted Secret (GANTRY_JOB_TOKEN_FILE), as the
Kubernetes backend gives it: a directory with one file per worker rank."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from executor.__main__ import read_token_file

from .fakeserver import FakeGantry
from .test_executor import PY, REPO_ROOT, child_env, finish


@pytest.fixture
def server():
    fake = FakeGantry().start()
    yield fake
    fake.stop()


def test_token_file_directory_picks_the_workers_rank(tmp_path: Path) -> None:
    tokens = tmp_path / "token"
    tokens.mkdir()
    (tokens / "0").write_text("gjt_0_s\n")
    (tokens / "1").write_text("gjt_1_s")
    assert read_token_file(str(tokens), 1) == "gjt_1_s"
    assert read_token_file(str(tokens / "0"), 5) == "gjt_0_s"


def test_executor_authenticates_with_the_token_from_the_mounted_directory(
    server: FakeGantry, tmp_path: Path
) -> None:
    tokens = tmp_path / "token"
    tokens.mkdir()
    (tokens / "0").write_text("wrong-token")
    (tokens / "1").write_text(server.token)
    server.spec["command"] = [PY, "-c", "print('hello from rank 1')"]
    env = child_env(
        {
            "GANTRY_API_URL": server.url,
            "GANTRY_JOB_ID": str(server.job),
            "GANTRY_WORKER_RANK": "1",
            "GANTRY_JOB_TOKEN_FILE": str(tokens),
            "GANTRY_WORKDIR": str(tmp_path / "work"),
            "GANTRY_FINAL_FLUSH_SECONDS": "20",
        }
    )
    proc = subprocess.Popen(
        [PY, "-m", "executor"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    code, err = finish(proc)
    assert code == 0, err
    assert [ln["text"] for ln in server.ordered_lines(1) if ln["stream"] == "stdout"] == [
        "hello from rank 1"
    ]


def test_missing_token_file_is_a_usage_error(tmp_path: Path) -> None:
    env = child_env(
        {
            "GANTRY_API_URL": "http://127.0.0.1:9",
            "GANTRY_JOB_ID": "1",
            "GANTRY_JOB_TOKEN_FILE": str(tmp_path / "absent"),
        }
    )
    done = subprocess.run(
        [PY, "-m", "executor"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 64
    assert "cannot read the token file" in done.stderr
