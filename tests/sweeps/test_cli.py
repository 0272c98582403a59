"""`gantry sweep` against Django's live server, in-process (Typer's CliRunner)."""

import json

import pytest
from typer.testing import CliRunner

from accounts import services as account_services
from sweeps.controller import control_sweep
from sweeps.models import Sweep, SweepState
from tests.sweeps.conftest import DOC

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gantry(live_server, owner, tmp_path, monkeypatch, settings):
    from gantry_cli.main import app

    settings.GANTRY_LOCAL_CPUS = 8
    token = account_services.create_api_token(actor=owner, name="cli", scope="write")[1]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "200")

    def invoke(*args):
        result = CliRunner().invoke(app, list(args), env={"GANTRY_URL": live_server.url, "GANTRY_TOKEN": token})
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return invoke


def test_start_show_and_stop_a_sweep_from_a_yaml_file(gantry, project, tmp_path):
    path = tmp_path / "sweep.yml"
    path.write_text("\n".join(f"{key}: {json.dumps(value)}" for key, value in DOC.items()))
    code, stdout, stderr = gantry("sweep", "start", str(path), "--project", "vision", "--dir", str(tmp_path))
    assert code == 0, stderr
    sweep = Sweep.objects.get()
    assert f"sweep #{sweep.pk} digits: running" in stdout
    control_sweep(sweep.pk)
    code, stdout, _ = gantry("sweep", "show", str(sweep.pk))
    assert code == 0 and "lr=" in stdout and stdout.count("running") >= 2
    code, stdout, _ = gantry("sweep", "stop", str(sweep.pk), "--json")
    assert code == 0 and json.loads(stdout)["state"] == SweepState.STOPPED


def test_a_bad_file_exits_6_naming_the_field_and_creates_nothing(gantry, project, tmp_path):
    path = tmp_path / "sweep.yml"
    path.write_text(json.dumps({**DOC, "sampler": "bayes"}))
    code, _, stderr = gantry("sweep", "start", str(path), "-p", str(project.pk), "--no-code")
    assert code == 6, stderr
    assert "sampler: one of random, grid, tpe, cmaes" in stderr
    assert not Sweep.objects.exists()
