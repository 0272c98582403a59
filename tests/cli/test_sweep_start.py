"""`gantry sweep start` as a user runs it (a subprocess against the live server): the
folder goes as the trials' code, as `gantry run` sends it, unless the document names
its own (issue 42)."""

import pytest

from snapshots.models import CodeSnapshot
from sweeps.forms import EXAMPLE
from sweeps.models import Sweep

pytestmark = pytest.mark.django_db(transaction=True)


def test_sweep_start_sends_the_current_folder_as_the_trials_code(live_gantry, project, tmp_path):
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    (repo / "examples" / "train_digits.py").write_text("print('digits')\n")
    (repo / "sweep.yml").write_text(EXAMPLE)

    done = live_gantry("sweep", "start", "sweep.yml", "-p", "vision", cwd=repo)

    assert done.returncode == 0, done.stderr
    sweep = Sweep.objects.get()
    assert "code: snapshot" in done.stderr and f"sweep #{sweep.pk} digits: running" in done.stdout
    code = CodeSnapshot.objects.get(pk=sweep.template["code_snapshot"])
    assert sorted(code.files.values_list("path", flat=True)) == ["examples/train_digits.py", "sweep.yml"]


def test_sweep_start_keeps_a_code_snapshot_the_document_names(live_gantry, owner, project, tmp_path):
    from tests.snapshots.builders import make_snapshot

    named = make_snapshot(owner, project, {"examples/train_digits.py": b"print(1)\n"})
    (tmp_path / "sweep.yml").write_text(
        EXAMPLE.replace("  cpus: 1\n", f"  cpus: 1\n  code_snapshot: {named.pk}\n")
    )
    done = live_gantry("sweep", "start", "sweep.yml", "-p", "vision")
    assert done.returncode == 0, done.stderr
    assert "code: snapshot" not in done.stderr
    assert Sweep.objects.get().template["code_snapshot"] == named.pk
    assert CodeSnapshot.objects.count() == 1
