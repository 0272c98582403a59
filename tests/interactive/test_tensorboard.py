"""TensorBoard for a job's logdir (interactive/tensorboard.py), on the notebook origin.

Access follows the notebook rule (`job.exec`: the submitter and maintainers; viewers
and outsiders never). The slow tests run the real thing: a job writes a scalar with
tensorboard's own tf-free writer from its command, and a real TensorBoard, sandboxed as
the job's user with no network, answers it through the notebook origin (uvicorn).
"""

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse

from interactive import proxy, tensorboard
from jobs.compute import sandbox
from jobs.models import JobWorker
from jobs.services.submit import submit_job
from jobs.states import transition
from tests.interactive.notebooks import Browser, OriginServer
from tests.jobs.conftest import wait_for

WRITE_SCALAR = (
    "from tensorboard.summary import DirectoryOutput, Writer; "
    "w = Writer(DirectoryOutput('tb/train')); "
    "[w.add_scalar('loss', 0.5 ** step, step=step) for step in range(4)]; "
    "w.flush(); w.close()"
)


def job_with_logdir(owner, project, workdir: Path, events: bool = True):
    """A job whose rank 0 worked in `workdir` (as the local backend records it)."""
    job = submit_job(owner, project, name="train", command="python train.py")
    workdir.mkdir(parents=True, exist_ok=True)
    if events:
        (workdir / "runs").mkdir(exist_ok=True)
        (workdir / "runs" / "events.out.tfevents.1700000000.host").write_bytes(b"")
    JobWorker.objects.update_or_create(job=job, rank=0, defaults={"workdir": str(workdir)})
    for state in ("admitted", "starting", "running"):
        transition(job, state, "test")
    return job


def test_outsider_gets_404(client_for, owner, outsider, project, tmp_path):
    job = job_with_logdir(owner, project, tmp_path / "w")
    client = client_for(outsider)
    assert client.get(reverse("tensorboard_open", args=[job.pk])).status_code == 404
    assert client.get(reverse("tensorboard_open", args=[job.pk]) + "?panel=1").status_code == 404


def test_viewer_is_refused_as_for_notebooks(client_for, owner, member, project, tmp_path):
    job = job_with_logdir(owner, project, tmp_path / "w")
    client = client_for(member)
    assert client.get(reverse("tensorboard_open", args=[job.pk])).status_code == 403
    page = client.get(job.get_absolute_url()).content.decode()
    assert reverse("tensorboard_open", args=[job.pk]) not in page


def test_submitter_is_sent_to_the_origin_with_a_ticket(client_for, owner, project, tmp_path):
    job = job_with_logdir(owner, project, tmp_path / "w")
    client = client_for(owner)
    url = reverse("tensorboard_open", args=[job.pk])
    first = client.get(url)
    assert first.status_code == 302
    assert first["Location"] == tensorboard.board_url(job.pk)
    state = "s" * 40
    back = urlsplit(client.get(url, {"state": state})["Location"])
    assert f"{back.scheme}://{back.netloc}" == proxy.notebook_origin(job.pk)
    assert back.path == proxy.ENTER_PATH
    # The ticket opens the TensorBoard app, not the notebook.
    ticket = parse_qs(back.query)["ticket"][0]
    from django.core import signing

    assert signing.loads(ticket, salt=proxy.TICKET_SALT)["a"] == "tensorboard"
    panel = client.get(url, {"panel": "1"}).content.decode()
    assert "Open TensorBoard" in panel and url in panel
    assert f'hx-get="{url}?panel=1"' in client.get(job.get_absolute_url()).content.decode()


def test_a_job_without_event_files_has_no_tensorboard(client_for, owner, project, tmp_path):
    job = job_with_logdir(owner, project, tmp_path / "w", events=False)
    client = client_for(owner)
    url = reverse("tensorboard_open", args=[job.pk])
    assert client.get(url).status_code == 404
    assert "Open TensorBoard" not in client.get(url, {"panel": "1"}).content.decode()
    assert tensorboard.tensorboard_target(job) is None


def test_event_files_are_found_without_following_links(owner, project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "events.out.tfevents.1.host").write_bytes(b"")
    job = job_with_logdir(owner, project, tmp_path / "w", events=False)
    (tmp_path / "w" / "link").symlink_to(elsewhere, target_is_directory=True)
    assert not tensorboard.has_event_files(job)
    (tmp_path / "w" / "deep" / "er").mkdir(parents=True)
    (tmp_path / "w" / "deep" / "er" / "events.out.tfevents.2.host").write_bytes(b"")
    assert tensorboard.has_event_files(job)


def sandbox_or_skip():
    if not sandbox.sandbox_status().available:
        assert os.environ.get("CI") != "true", sandbox.sandbox_status().reason
        pytest.skip(f"no sandbox here: {sandbox.sandbox_status().reason}")


PROBE = r"""
import json, os, socket, sys
seen = {"uid": os.getuid(), "logs": sorted(os.listdir("/logs"))}
seen["paths"] = {p: os.path.exists(p) for p in sys.argv[1:]}
try:
    socket.create_connection(("127.0.0.1", int(os.environ.get("PORT", "22"))), timeout=2)
    seen["net"] = "connected"
except OSError as exc:
    seen["net"] = type(exc).__name__
try:
    open("/logs/planted", "w")
    seen["logs_writable"] = True
except OSError:
    seen["logs_writable"] = False
open("/run/tensorboard/probe", "w").write("ok")
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_the_server_runs_sandboxed_and_sees_only_its_jobs_logdir(
    owner, project, tmp_path, settings
):
    """The exact sandbox TensorBoard gets, with a probe in TensorBoard's place."""
    sandbox_or_skip()
    settings.GANTRY_JOBS_DIR = str(tmp_path / "jobs")
    job = job_with_logdir(owner, project, tmp_path / "jobs" / "1" / "w")
    other = job_with_logdir(owner, project, tmp_path / "jobs" / "2" / "w")
    (tmp_path / "jobs" / "2" / "w" / "secret.txt").write_text("other job")
    rundir = tensorboard.run_dir(job)
    rundir.mkdir(parents=True)
    uid = tensorboard.server_uid(job)
    os.chown(rundir, uid, uid)
    python = sys.executable
    argv = tensorboard.server_argv(job, python, tensorboard.logdir(job), rundir, uid)
    assert argv[-5:-4] == [tensorboard.INSIDE_SCRIPT]
    assert "--unshare-net" in argv and str(tmp_path / "jobs" / "2") not in shlex.join(argv)
    watched = [
        str(tensorboard.logdir(other)),
        str(settings.DATA_DIR),
        str(settings.BASE_DIR / "config"),
    ]
    argv = argv[:-5] + ["-c", PROBE, *watched]
    with socket.socket() as listener:  # a service on the host's loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        env = {**tensorboard._environment(), "PORT": str(listener.getsockname()[1])}
        # bwrap passes its environment on; the probe reads PORT from it.
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["uid"] == sandbox.job_uid(job) != 0
    assert seen["logs"] == ["runs"]
    assert seen["paths"] == dict.fromkeys(watched, False)
    assert seen["net"] in ("ConnectionRefusedError", "OSError")  # loopback of its own only
    assert seen["logs_writable"] is False
    assert (rundir / "probe").read_text() == "ok"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_tensorboard_answers_through_the_origin_with_the_jobs_scalar(
    running_jobs, owner, member, project, client_for, settings, tmp_path
):
    job = submit_job(owner, project, name="train", command=f"python -c {shlex.quote(WRITE_SCALAR)}")
    job = wait_for(job, "succeeded", "failed")
    assert job.state == "succeeded", job.state_reason
    assert tensorboard.has_event_files(job)
    settings.GANTRY_TENSORBOARD_IDLE_MINUTES = 0.1  # 6 s: it stops itself when left alone
    with OriginServer() as origin:
        settings.GANTRY_NOTEBOOK_ORIGIN = origin.origin_template
        board = f"/jobs/{job.pk}/tensorboard/"
        browser = Browser(origin.port, client_for(owner))
        start = browser.request("GET", job.pk, board)
        assert start.status_code == 302
        to_gantry = urlsplit(start.headers["location"])
        assert to_gantry.path == reverse("tensorboard_open", args=[job.pk])
        ticket_answer = browser.gantry.get(f"{to_gantry.path}?{to_gantry.query}")
        assert ticket_answer.status_code == 302
        enter = urlsplit(ticket_answer["Location"])
        entered = browser.request("GET", job.pk, f"{enter.path}?{enter.query}")
        assert entered.status_code == 302 and entered.headers["location"] == board

        scalars = board + "data/plugin/scalars/scalars?run=tb%2Ftrain&tag=loss"
        deadline = time.monotonic() + 120
        while True:
            answer = browser.request("GET", job.pk, scalars)
            if answer.status_code == 200:
                break
            assert answer.status_code == 503, (answer.status_code, answer.text[:300])
            log = tensorboard.run_dir(job).parent / f"{job.pk}.log"
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        points = answer.json()
        assert [(step, value) for _, step, value in points] == [
            (0, 1.0),
            (1, 0.5),
            (2, 0.25),
            (3, 0.125),
        ]
        assert browser.request("GET", job.pk, board).status_code == 200  # the app's page

        # The server is the job's user's (its socket too), not Gantry's.
        sock = tensorboard.run_dir(job) / tensorboard.SOCKET
        assert sock.stat().st_uid == tensorboard.server_uid(job)
        if sandbox.sandbox_status().available:
            assert sock.stat().st_uid == sandbox.job_uid(job) != 0

        # A viewer's session cannot be had, and a forged path gets nothing.
        viewer = Browser(origin.port, client_for(member))
        start = viewer.request("GET", job.pk, board)
        back = urlsplit(start.headers["location"])
        assert viewer.gantry.get(f"{back.path}?{back.query}").status_code == 403
        assert viewer.request("GET", job.pk, scalars).status_code in (302, 403)

        # Left idle, it stops itself; the next request starts it again.
        deadline = time.monotonic() + 60
        while sock.exists():
            assert time.monotonic() < deadline, "TensorBoard did not stop when idle"
            time.sleep(0.5)
        assert browser.request("GET", job.pk, scalars).status_code in (200, 503)
