"""`gantry run` against a live Gantry (uvicorn + qcluster + real executors).

The digits example, copied into a temporary folder that is not on the Gantry host's
paths the job may read, is sent as a code snapshot, trained and followed to its end; the
CLI exits with the job's exit code. Run again on the same tree, nothing is uploaded.
"""

import json
import shutil

import pytest

from jobs.models import Job
from snapshots.models import CodeSnapshot
from tests.jobs.test_examples import EXAMPLES, required_module

pytestmark = pytest.mark.slow


def digits_folder(tmp_path):
    code = tmp_path / "digits-code"
    code.mkdir()
    for name in ("train_digits.py", "digits_common.py"):
        shutil.copy(EXAMPLES / name, code / name)
    (code / "outputs").mkdir()
    (code / "outputs" / "old-model.pt").write_bytes(b"x" * 1000)  # ignored below
    (code / ".gitignore").write_text("outputs/\n")
    (code / "gantry.yml").write_text("project: vision\nname: digits from the CLI\n")
    return code


def test_run_follow_trains_the_digits_example_and_a_rerun_uploads_nothing(
    gantry_server, gantry_cli, project, tmp_path
):
    required_module("torch")
    required_module("sklearn")
    code = digits_folder(tmp_path)

    done = gantry_cli(
        "run", "--follow", "-P", "epochs=1", "--", "python", "train_digits.py",
        url=gantry_server.url, cwd=code,
    )  # fmt: skip

    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    job = Job.objects.get(name="digits from the CLI")
    assert job.state == "succeeded"
    assert "val_accuracy=" in done.stdout, done.stdout[-2000:]
    assert f"job {job.pk} succeeded" in done.stderr
    snapshot = CodeSnapshot.objects.get(pk=job.code_snapshot_id)
    paths = set(snapshot.files.values_list("path", flat=True))
    assert paths == {".gitignore", "gantry.yml", "train_digits.py", "digits_common.py"}

    again = gantry_cli(
        "run", "--json", "--name", "second", "--", "python", "train_digits.py",
        url=gantry_server.url, cwd=code,
    )  # fmt: skip

    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert answer["snapshot"]["uploaded_blobs"] == 0
    assert answer["snapshot"]["uploaded_bytes"] == 0
    assert answer["snapshot"]["file_count"] == 4
    assert answer["job"]["code_snapshot"] == answer["snapshot"]["id"]
    cancelled = gantry_cli("cancel", str(answer["job"]["id"]), url=gantry_server.url)
    assert cancelled.returncode == 0, cancelled.stderr

    # A failing command: --follow ends with the job's own exit code.
    (code / "fail.py").write_text("print('about to fail', flush=True)\nraise SystemExit(3)\n")
    failed = gantry_cli(
        "run", "--follow", "--name", "failing", "--", "python", "fail.py",
        url=gantry_server.url, cwd=code,
    )  # fmt: skip
    assert failed.returncode == 3, (failed.stdout[-2000:], failed.stderr[-2000:])
    assert "about to fail" in failed.stdout
    assert "failed" in failed.stderr
