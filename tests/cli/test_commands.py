"""The CLI's commands against Django's live server, run in-process (Typer's CliRunner): the
same HTTP, the same API, without a process per call. Exit codes, --json, login's file."""

import hashlib
import io
import json
import stat
import threading
import time

import pytest
from typer.testing import CliRunner

from accounts import services as account_services
from datasets.models import UploadSession, UploadState
from datasets.services import catalog, commits
from jobs.models import Job
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from projects import services as project_services
from tests.datasets.conftest import fs_storage  # noqa: F401 - a fixture used here

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gantry(live_server, tmp_path, write_token, monkeypatch):
    """invoke(*args, token=...) -> (exit code, stdout, stderr), signed in by environment."""
    from gantry_cli.main import app

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")

    def invoke(*args, token=write_token, url=live_server.url):
        env = {"GANTRY_URL": url or "", "GANTRY_TOKEN": token or ""}
        result = CliRunner().invoke(app, list(args), env=env)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return invoke


def test_login_checks_the_token_and_keeps_it_for_the_user_alone(gantry, live_server, tmp_path):
    code, out, err = gantry("login", "--url", live_server.url, "--token", "gty_not-a-token",
                            url=None, token=None)  # fmt: skip
    assert code == 3, err
    assert not (tmp_path / "config" / "gantry" / "config.json").exists()

    code, out, err = gantry("whoami", url=None, token=None)
    assert code == 3 and "gantry login" in err


def test_login_then_whoami_from_the_stored_file(gantry, live_server, tmp_path, write_token):
    code, out, err = gantry("login", "--url", live_server.url + "/", "--token", write_token,
                            url=None, token=None)  # fmt: skip
    assert code == 0, err
    stored = tmp_path / "config" / "gantry" / "config.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text()) == {"url": live_server.url, "token": write_token}

    code, out, err = gantry("whoami", "--json", url=None, token=None)
    assert code == 0, err
    assert json.loads(out)["username"] == "olivia"


def test_a_revoked_token_exits_3_and_an_unreachable_server_7(gantry, owner):
    api_token, key = account_services.create_api_token(actor=owner, name="old", scope="read")
    account_services.revoke_api_token(actor=owner, token=api_token)
    assert gantry("whoami", token=key)[0] == 3
    assert gantry("whoami", url="http://127.0.0.1:9")[0] == 7


def test_ps_why_and_cancel_a_queued_job(gantry, owner, project):
    job = submit_job(owner, project, name="waiting", command="python train.py")

    code, out, err = gantry("ps", "--json")
    assert code == 0, err
    assert [row["id"] for row in json.loads(out)] == [job.pk]
    code, out, err = gantry("ps")
    assert "waiting" in out and "queued" in out

    code, out, err = gantry("why", str(job.pk), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["state"] == "queued"
    assert {"queue_position", "estimated_start_at", "state_reason"} <= set(answer)
    code, out, err = gantry("why", str(job.pk))
    assert "queued" in out and "queue position" in out

    code, out, err = gantry("cancel", str(job.pk))
    assert code == 0, err
    job.refresh_from_db()
    assert job.state == "cancelled"
    code, out, err = gantry("ps", "--state", "queued", "--json")
    assert json.loads(out) == []
    code, out, err = gantry("ps", "--state", "cancelled", "--mine", "--json")
    assert [row["id"] for row in json.loads(out)] == [job.pk]


def test_another_tenants_job_is_not_found_and_a_viewer_may_not_cancel(
    gantry, owner, member, outsider, project, other_project
):
    theirs = submit_job(outsider, other_project, name="theirs", command="true")
    assert gantry("why", str(theirs.pk))[0] == 4
    assert gantry("cancel", str(theirs.pk))[0] == 4
    assert Job.objects.get(pk=theirs.pk).state == "queued"

    project_services.add_project_member(actor=owner, project=project, user=member, role="viewer")
    ours = submit_job(owner, project, name="ours", command="true")
    _, viewer_key = account_services.create_api_token(actor=member, name="v", scope="write")
    code, out, err = gantry("cancel", str(ours.pk), token=viewer_key)
    assert code == 5, err
    assert Job.objects.get(pk=ours.pk).state == "queued"


def test_cp_copies_one_output_or_a_folder_of_them(gantry, owner, project, tmp_path):
    job = submit_job(owner, project, name="done", command="true")
    for path, data in {"model.pt": b"weights", "plots/a.png": b"png-a", "plots/b.png": b"b"}.items():
        store_artifact(job, 0, path, io.BytesIO(data), hashlib.sha256(data).hexdigest())
    dest = tmp_path / "here"
    dest.mkdir()

    assert gantry("cp", f"{job.pk}:outputs/model.pt", str(dest))[0] == 0
    assert (dest / "model.pt").read_bytes() == b"weights"
    assert gantry("cp", f"{job.pk}:outputs/plots", str(dest))[0] == 0
    assert (dest / "plots" / "a.png").read_bytes() == b"png-a"
    code, out, err = gantry("cp", f"{job.pk}:outputs/nothing.txt", str(dest))
    assert code == 4 and "nothing.txt" in err
    assert gantry("cp", "model.pt", str(dest))[0] == 2


def test_run_refuses_a_bad_gantry_yml_naming_the_field(gantry, project, tmp_path, monkeypatch):
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "gantry.yml").write_text("project: vision\ncommand: python t.py\ngpus: two\n")
    code, out, err = gantry("run", "--dir", str(code_dir))
    assert code == 2
    assert "gpus" in err and "whole number" in err
    (code_dir / "gantry.yml").write_text("project: vision\ncomand: python t.py\n")
    code, out, err = gantry("run", "--dir", str(code_dir))
    assert code == 2 and "'comand'" in err
    assert not Job.objects.exists()


def test_run_refuses_a_tree_over_the_limit_naming_its_biggest_files(
    gantry, project, tmp_path, monkeypatch
):
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "train.py").write_text("print(1)\n")
    (code_dir / "weights.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    monkeypatch.setenv("GANTRY_SNAPSHOT_MAX_MB", "1")
    code, out, err = gantry("run", "-p", "vision", "--dir", str(code_dir), "--", "python", "train.py")
    assert code == 2
    assert "weights.bin (2.0 MiB)" in err and ".gantryignore" in err
    assert not Job.objects.exists()


@pytest.fixture
def committer():
    stop = threading.Event()

    def work():
        while not stop.is_set():
            for s in UploadSession.objects.filter(state=UploadState.COMMITTING):
                commits.finish_commit(s.pk)
            time.sleep(0.05)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def test_push_links_contents_the_tenant_holds_and_sends_only_new_ones(
    gantry, fs_storage, committer, owner, project, tmp_path  # noqa: F811
):
    """What `datasets/cli.py` did before it moved here."""
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"alpha")
    (folder / "sub" / "b.bin").write_bytes(b"\x01" * (6 * 1024 * 1024))

    code, out, err = gantry("datasets", "push", str(folder), "-d", "digits", "--json")
    assert code == 0, err
    first = json.loads(out)
    assert first["parts_sent"] == 3  # a.txt, and b.bin in two 5 MiB parts
    (folder / "c.txt").write_bytes(b"alpha")  # the same content under a new name: linked
    code, out, err = gantry("datasets", "push", str(folder), "-d", "digits", "--json")
    assert code == 0, err
    second = json.loads(out)

    assert second["parts_sent"] == 0
    assert all(f["part_count"] == 0 for f in second["files"])
    v1 = dataset.versions.get(pk=first["version"])
    v2 = dataset.versions.get(pk=second["version"])
    assert set(v1.files.values_list("path", flat=True)) == {"a.txt", "sub/b.bin"}
    assert set(v2.files.values_list("path", flat=True)) == {"a.txt", "c.txt", "sub/b.bin"}
    code, out, err = gantry("datasets", "versions", "digits", "--json")
    assert code == 0, err
    assert {v["id"] for v in json.loads(out)} == {v1.pk, v2.pk}


def test_models_register_alias_and_predict_by_alias(gantry, owner, project):
    from tests.modelhub.test_modelhub import finished_job

    job = finished_job(owner, project)

    code, out, err = gantry("models", "register", "--job", str(job.pk), "--name", "digits", "--json")
    assert code == 0, err
    version = json.loads(out)
    assert version["number"] == 1 and version["source_job"] == job.pk
    code, out, err = gantry("models", "alias", "digits", "production", "1")
    assert code == 0, err
    code, out, err = gantry("models", "list", "--json")
    assert json.loads(out)[0]["aliases"][0]["name"] == "production"

    code, out, err = gantry(
        "models", "predict", "digits@production", "--command", "python predict.py", "--json"
    )
    assert code == 0, err
    predicted = Job.objects.get(pk=json.loads(out)["id"])
    assert predicted.command == "python predict.py"
    assert gantry("models", "predict", "digits@staging", "--command", "x")[0] == 4


def test_run_records_git_state_inputs_and_spec_from_gantry_yml(
    gantry, fs_storage, owner, project, tmp_path  # noqa: F811
):
    import subprocess

    from snapshots.models import CodeSnapshot
    from tests.datasets.builders import upload_files

    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    version = upload_files(owner, dataset, {"train.csv": b"a,b\n1,2\n"}).version
    code_dir = tmp_path / "repo"
    code_dir.mkdir()
    (code_dir / "train.py").write_text("print('hi')\n")
    (code_dir / "gantry.yml").write_text(
        "project: lab-a/vision\nname: from yml\ncommand: python train.py\n"
        "parameters: {lr: 0.1, epochs: 2}\nignore: ['*.tmp']\n"
    )
    (code_dir / "scratch.tmp").write_text("left out")
    git = ["git", "-C", str(code_dir), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "train.py", "gantry.yml"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    (code_dir / "train.py").write_text("print('changed')\n")  # dirty

    code, out, err = gantry(
        "run", "--dir", str(code_dir), "-P", "epochs=3", "-i", str(version.pk), "--json"
    )

    assert code == 0, err
    job = Job.objects.get(pk=json.loads(out)["job"]["id"])
    assert (job.name, job.command) == ("from yml", "python train.py")
    assert job.parameters == {"lr": 0.1, "epochs": "3"}  # the command line's value wins
    assert [i["dataset_version"] for i in job.inputs] == [version.pk]
    snapshot = CodeSnapshot.objects.get(pk=job.code_snapshot_id)
    assert sorted(snapshot.files.values_list("path", flat=True)) == ["gantry.yml", "train.py"]
    assert snapshot.git_branch == "main" and snapshot.git_dirty is True
    assert len(snapshot.git_commit) == 40
