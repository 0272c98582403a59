"""`make run` for a newcomer: it talks while it installs, installs only what serving needs,
and the examples say what is missing instead of a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def planned(target: str) -> str:
    """The commands `make TARGET` would run on a machine with no virtualenv yet."""
    result = subprocess.run(
        ["make", "-n", "-B", target, "VENV=/nonexistent-venv"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    return result.stdout


def test_make_run_shows_progress_and_skips_the_test_tools():
    plan = planned("run")
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert installs, plan
    assert not any("--quiet" in line for line in installs)
    assert any("'.[notebooks]'" in line for line in installs)
    assert not any("dev" in line or "examples" in line for line in installs)
    assert "manage.py serve" in plan


def test_make_test_installs_the_test_tools_examples_and_docs():
    # The docs extra: make test builds the manual with --strict (tests/core/test_docs.py).
    assert "'.[dev,examples,docs]'" in planned("test")


@pytest.mark.parametrize("script", ["train_digits.py", "train_digits_ddp.py", "predict_digits.py"])
def test_an_example_without_pytorch_says_how_to_get_it(script):
    # -S: no site-packages, so this Python has neither PyTorch nor NumPy, as after `make run`.
    result = subprocess.run(
        [sys.executable, "-S", script], cwd=ROOT / "examples", capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "run `make examples`" in result.stderr
    assert "Traceback" not in result.stderr
