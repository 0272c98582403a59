"""Start-up configuration: bad values stop Gantry with a message naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    full_env.update(env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "name,value",
    [("DEBUG", "maybe"), ("GANTRY_ENV", "staging"), ("REDIS_URL", "localhost:6379"), ("GANTRY_STORAGE", "ftp"), ("GANTRY_WORKERS", "two")],
)
def test_bad_value_stops_startup_with_a_readable_message(name, value):
    result = manage("check", **{name: value})
    assert result.returncode != 0
    assert f"Configuration error in {name}" in result.stderr


def test_production_requires_a_secret_key():
    result = manage("check", GANTRY_ENV="production", ALLOWED_HOSTS="gantry.example.org")
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr


def test_production_check_deploy_is_clean(tmp_path):
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING",
        GANTRY_ENV="production", SECRET_KEY="x" * 20 + "ProductionSecretKeyForTheCheck-0123456789abcdefgh",
        ALLOWED_HOSTS="gantry.example.org", DEBUG="false", GANTRY_DATA_DIR=str(tmp_path),
        GANTRY_NOTEBOOK_ORIGIN="https://{job}.nb.gantry.example.org",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize("value,prepared", [("", True), ("false", False)])
def test_postgresql_statements_are_prepared_unless_turned_off(value, prepared):
    show = "from django.db import connection as c; o = c.settings_dict['OPTIONS']; print(o.get('server_side_binding'), o.get('prepare_threshold'))"
    env = {"DATABASE_URL": "postgres://gantry@db.invalid:5432/gantry"}
    if value:
        env["DATABASE_PREPARED_STATEMENTS"] = value
    result = manage("shell", "-c", show, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == (["True", "5"] if prepared else ["None", "None"])


def test_gantry_port_alone_moves_the_address_jobs_call_back():
    # `GANTRY_PORT=8100 make run`: executors and the notebook origin must call 8100, not 8000.
    show = "from django.conf import settings as s; print(s.GANTRY_PORT, s.GANTRY_URL)"
    result = manage("shell", "-c", show, GANTRY_PORT="8100")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["8100", "http://127.0.0.1:8100"]
    result = manage("shell", "-c", show, GANTRY_PORT="8100", GANTRY_URL="https://gantry.example.org")
    assert result.stdout.split()[-1] == "https://gantry.example.org"
    result = manage("check", GANTRY_PORT="70000")
    assert result.returncode != 0 and "GANTRY_PORT" in result.stderr


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("10.1.2.3", "http://10.1.2.3:8100"),  # listening on one interface: call it there
        ("0.0.0.0", "http://127.0.0.1:8100"),  # every interface: loopback reaches it
        ("::", "http://[::1]:8100"),
        ("fd00::5", "http://[fd00::5]:8100"),
    ],
)
def test_gantry_host_moves_the_address_jobs_call_back(host, url):
    show = "from django.conf import settings as s; print(s.GANTRY_URL)"
    result = manage("shell", "-c", show, GANTRY_HOST=host, GANTRY_PORT="8100")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == url


def test_values_starting_with_a_dollar_are_read_verbatim():
    # django-environ reads "$NAME" as a reference to another variable: a generated secret key
    # starting with "$" (1 in 50) became another value and broke every signed session.
    show = (
        "from django.conf import settings as s; "
        "print(s.SECRET_KEY); print(s.STORAGES['default']['OPTIONS']['secret_key']); "
        "print(s.DATABASES['default']['PASSWORD']); print(s.CSRF_TRUSTED_ORIGINS)"
    )
    secret = "$ts&_*k3y-that-starts-with-a-dollar-0123456789abcdefghij"
    result = manage(
        "shell", "-c", show,
        SECRET_KEY=secret, GANTRY_STORAGE="s3", S3_ENDPOINT_URL="http://127.0.0.1:1",
        S3_ACCESS_KEY_ID="$HOME", S3_SECRET_ACCESS_KEY="$SECRET_KEY",
        DATABASE_URL="postgres://gantry:$PATH@db.invalid:5432/gantry",
        CSRF_TRUSTED_ORIGINS="https://a.example.org,https://b.example.org",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-4:] == [
        secret, "$SECRET_KEY", "$PATH", "['https://a.example.org', 'https://b.example.org']",
    ]


def test_a_secret_key_file_starting_with_a_dollar_survives_the_round_trip(tmp_path):
    # The development key kept in var/secret_key is handed to server processes through the
    # environment by the tests; both readings must agree.
    (tmp_path / "secret_key").write_text("$" + "k" * 49)
    show = "from django.conf import settings as s; print(s.SECRET_KEY)"
    from_file = manage("shell", "-c", show, GANTRY_DATA_DIR=str(tmp_path))
    assert from_file.returncode == 0, from_file.stderr
    through_env = manage("shell", "-c", show, SECRET_KEY=from_file.stdout.splitlines()[-1])
    assert through_env.stdout.splitlines()[-1] == "$" + "k" * 49
