"""The example workloads in examples/, run as Gantry runs them: real processes, real torch.

torch is an optional extra (`pip install -e '.[examples]'`). Without it these
tests skip on a developer's machine, and fail under CI=true.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TIMEOUT = 120

pytestmark = pytest.mark.slow


def required_module(name: str):
    """importorskip, except that under CI a missing module is a failure, never a skip."""
    if os.environ.get("CI") == "true":
        try:
            return __import__(name)
        except ImportError as exc:
            pytest.fail(f"{name} is not installed, and CI=true requires it: {exc}")
    return pytest.importorskip(name)


@pytest.fixture(scope="module", autouse=True)
def _torch():
    required_module("torch")
    required_module("sklearn")


def job_env(tmp_path, name, **extra):
    """The environment the executor gives a command (see executor/README.md)."""
    outputs = tmp_path / name / "outputs"
    outputs.mkdir(parents=True)
    env = {
        **os.environ,
        "GANTRY_OUTPUTS_DIR": str(outputs),
        "GANTRY_METRICS_FILE": str(tmp_path / name / "metrics.jsonl"),
        "GANTRY_PREEMPT_FILE": str(tmp_path / name / "preempt"),
        # `from executor import log_metric` finds the in-tree executor.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    return env, outputs


def run(script, *args, env, cwd):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def metrics(path: Path) -> dict[str, list[dict]]:
    by_name: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        by_name.setdefault(record["name"], []).append(record)
    return by_name


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """train_digits.py for two epochs, as a Gantry train job runs it."""
    tmp_path = tmp_path_factory.mktemp("train")
    env, outputs = job_env(tmp_path, "train")
    result = run("train_digits.py", "--epochs", "2", "--seed", "1", env=env, cwd=tmp_path)
    return result, outputs, Path(env["GANTRY_METRICS_FILE"])


def test_training_logs_loss_and_accuracy(trained):
    result, _, metrics_file = trained
    logged = metrics(metrics_file)
    assert len(logged["loss"]) > 20  # one a step
    assert [record["step"] for record in logged["loss"]] == sorted(
        record["step"] for record in logged["loss"]
    )
    assert len(logged["val_accuracy"]) == 2  # one an epoch
    assert len(logged["val_loss"]) == 2
    assert "epoch 2/2" in result.stdout


def test_training_writes_tensorboard_event_files_in_its_working_directory(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, _, metrics_file = trained
    workdir = metrics_file.parent.parent  # the command's working directory (job_env)
    events = list((workdir / "runs").rglob("*tfevents*"))
    assert len(events) == 1, events
    board = EventAccumulator(str(events[0].parent))
    board.Reload()
    assert {"loss", "train_loss", "val_loss", "val_accuracy"} <= set(board.Tags()["scalars"])
    logged = metrics(metrics_file)
    assert [e.step for e in board.Scalars("val_accuracy")] == [
        r["step"] for r in logged["val_accuracy"]
    ]


def test_training_without_tensorboard_trains_and_says_so(tmp_path):
    # A `tensorboard` package that cannot be imported, first on the path: as where it is
    # not installed (torch.utils.tensorboard raises ImportError then).
    hidden = tmp_path / "hidden" / "tensorboard"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'tensorboard'\")\n")
    env, outputs = job_env(tmp_path, "plain")
    env["PYTHONPATH"] = os.pathsep.join([str(hidden.parent), env["PYTHONPATH"]])

    result = run("train_digits.py", "--epochs", "1", env=env, cwd=tmp_path)

    assert "no TensorBoard event files: No module named 'tensorboard'" in result.stdout
    assert "Traceback" not in result.stderr
    assert (outputs / "model.pt").exists()
    assert not list(tmp_path.rglob("*tfevents*"))


def test_training_saves_a_model_that_learned(trained):
    _, outputs, metrics_file = trained
    assert (outputs / "model.pt").stat().st_size > 0
    meta = json.loads((outputs / "meta.json").read_text())
    assert meta["hyperparameters"] == {"epochs": 2, "lr": 0.003, "batch_size": 64, "seed": 1}
    # Two epochs reach about 0.9 on the held-out split; 0.7 leaves room for any CPU.
    assert meta["val_accuracy"] > 0.7
    assert metrics(metrics_file)["val_accuracy"][-1]["value"] == pytest.approx(meta["val_accuracy"])


def test_training_writes_a_torchscript_model_that_runs_without_the_examples_code(trained):
    """model.torchscript.pt, what a model endpoint serves: loaded with torch alone (no
    DigitsNet in sight), it takes rows of 64 raw pixels and scores the held-out split
    as training did."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    _, outputs, _ = trained
    scripted = torch.jit.load(str(outputs / "model.torchscript.pt"), map_location="cpu")
    digits = load_digits()
    # examples/digits_common.py's split, written out.
    _, x_test, _, y_test = train_test_split(
        digits.data.astype(np.float32),
        digits.target,
        test_size=0.2,
        random_state=0,
        stratify=digits.target,
    )
    with torch.no_grad():
        predicted = scripted(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    meta = json.loads((outputs / "meta.json").read_text())
    assert (predicted == y_test).mean() == pytest.approx(meta["val_accuracy"], abs=1e-6)
    with pytest.raises(torch.jit.Error, match="expected rows of 64 pixel values"):
        scripted(torch.zeros(1, 3))


def test_prediction_writes_predictions_csv(trained, tmp_path):
    _, trained_outputs, _ = trained
    env, outputs = job_env(tmp_path, "predict")

    result = run(
        "predict_digits.py", "--model", str(trained_outputs / "model.pt"), env=env, cwd=tmp_path
    )

    rows = (outputs / "predictions.csv").read_text().splitlines()
    assert rows[0] == "index,prediction,confidence,label"
    assert len(rows) == 1 + 360  # the test split
    accuracy = json.loads((outputs / "predict_meta.json").read_text())["accuracy"]
    assert accuracy > 0.7
    assert f"accuracy: {accuracy:.4f}" in result.stdout
    assert metrics(Path(env["GANTRY_METRICS_FILE"]))["accuracy"][0]["value"] == accuracy


def test_prediction_reads_a_csv(trained, tmp_path):
    from sklearn.datasets import load_digits

    _, trained_outputs, _ = trained
    digits = load_digits()
    images = tmp_path / "images.csv"
    images.write_text(
        "\n".join(",".join(str(int(value)) for value in row) for row in digits.data[:5]) + "\n"
    )
    env, outputs = job_env(tmp_path, "predict")

    run(
        "predict_digits.py",
        "--model",
        str(trained_outputs / "model.pt"),
        "--input",
        str(images),
        env=env,
        cwd=tmp_path,
    )

    rows = (outputs / "predictions.csv").read_text().splitlines()
    assert rows[0] == "index,prediction,confidence"  # no labels, no accuracy
    assert len(rows) == 6
    assert not (outputs / "predict_meta.json").exists()


def test_training_checkpoints_and_exits_cleanly_when_asked_to_stop(tmp_path):
    env, outputs = job_env(tmp_path, "stop")
    Path(env["GANTRY_PREEMPT_FILE"]).touch()  # what the executor does before SIGTERM

    result = run("train_digits.py", "--epochs", "2", env=env, cwd=tmp_path)

    assert "stop requested" in result.stdout
    assert (outputs / "checkpoint.pt").exists()
    assert not (outputs / "model.pt").exists()
    resumed, outputs_after = job_env(tmp_path, "resume")
    run(
        "train_digits.py",
        "--epochs",
        "1",
        "--resume",
        str(outputs / "checkpoint.pt"),
        env=resumed,
        cwd=tmp_path,
    )
    assert (outputs_after / "model.pt").exists()


def test_distributed_training_on_two_processes(tmp_path):
    env, outputs = job_env(
        tmp_path, "ddp", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2"
    )
    # Two workers, as Gantry (or torchrun) starts them: the same command, its own RANK.
    workers = [
        subprocess.Popen(
            [sys.executable, str(EXAMPLES / "train_digits_ddp.py"), "--epochs", "2"],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        logs = [worker.communicate(timeout=TIMEOUT)[0] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    for rank, (worker, log) in enumerate(zip(workers, logs, strict=True)):
        assert worker.returncode == 0, log
        assert f"[rank {rank}/2] started" in log
        assert f"[rank {rank}/2] done" in log
    assert "saved" in logs[0] and "saved" not in logs[1]
    assert (outputs / "model.pt").exists()
    meta = json.loads((outputs / "meta.json").read_text())
    assert meta["world_size"] == 2
    assert meta["val_accuracy"] > 0.5
    logged = metrics(Path(env["GANTRY_METRICS_FILE"]))
    assert len(logged["val_accuracy"]) == 2  # rank 0 alone logs
