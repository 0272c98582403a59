"""Tenants' jobs cannot reach each other or Gantry on the local backend (issue 18).

An adversarial job of tenant B, run sandboxed next to a running job and a running
notebook of tenant A, tries every read, write and signal an attacker tried against the
unsandboxed backend; each attempt goes into a JSON report among its outputs, and every
one must have been refused. Real processes throughout: the live server, executors,
bubblewrap, JupyterLab.
"""

import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from interactive import proxy
from jobs.compute import sandbox
from jobs.compute.local import process_start_time
from jobs.models import Artifact, JobWorker
from jobs.queries import log_lines
from jobs.services.lifecycle import cancel_job
from jobs.services.submit import submit_job
from tests.conftest import service_required
from tests.interactive.notebooks import lab_get
from tests.jobs.conftest import wait_for, wait_until

pytestmark = pytest.mark.slow

ADVERSARY = r"""
import json, os, signal, socket, sys, urllib.request

targets = json.load(open(sys.argv[1]))
report = []


def attempt(name, action):
    try:
        result = action()
    except Exception as exc:  # refused: what we want
        report.append({"name": name, "outcome": "refused", "detail": repr(exc)[:300]})
        return
    report.append({"name": name, "outcome": "succeeded", "detail": repr(result)[:300]})


def read(path):
    with open(path, "rb") as fh:
        return fh.read()


for name, path in targets["reads"].items():
    attempt("read " + name, lambda path=path: read(path))
for name, path in targets["lists"].items():
    attempt("list " + name, lambda path=path: os.listdir(path))
for name, pid in targets["environs"].items():
    attempt("environ of " + name, lambda pid=pid: read(f"/proc/{pid}/environ"))
for name, path in targets["writes"].items():
    attempt("write " + name, lambda path=path: open(path, "w").write("pwned"))
for name, pid in targets["kills"].items():
    attempt("SIGKILL " + name, lambda pid=pid: os.kill(pid, signal.SIGKILL))
    attempt("SIGKILL group of " + name, lambda pid=pid: os.killpg(pid, signal.SIGKILL))
for name, pid in targets["probes"].items():  # signal 0: would it be allowed?
    attempt("signal " + name, lambda pid=pid: os.kill(pid, 0))
attempt("SIGSTOP the notebook server", lambda: os.kill(targets["notebook_pid"], signal.SIGSTOP))


def notebook_without_token():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(targets["notebook_socket"])
    sock.sendall(f"GET {targets['notebook_base']}api/sessions HTTP/1.0\r\n\r\n".encode())
    return sock.recv(100)


attempt("use the notebook's API without its token", notebook_without_token)


def connect(host, port):
    with socket.create_connection((host, port), timeout=5) as sock:
        return "connected", sock.getpeername()


for name, (host, port) in targets["connects"].items():
    attempt("connect to " + name, lambda host=host, port=port: connect(host, port))

# Loopback itself works: the job's own server, in the job's own namespace.
own = socket.socket()
own.bind(("127.0.0.1", 0))
own.listen()
with socket.create_connection(own.getsockname(), timeout=5):
    print("own loopback works")
with open("/proc/net/dev") as fh:
    print("interfaces:", sorted(line.split(":")[0].strip() for line in fh if ":" in line))
own = os.path.join(os.environ["GANTRY_OUTPUTS_DIR"], "report.json")
with open(own, "w") as fh:
    json.dump(report, fh, indent=1)
print(f"{len(report)} attempts, {sum(r['outcome'] == 'refused' for r in report)} refused")
"""

VICTIM = """
import os, socket, time
with open(os.path.join(os.environ["GANTRY_OUTPUTS_DIR"], "weights.bin"), "w") as fh:
    fh.write({marker!r})
server = socket.socket()  # a server on its loopback, as a rendezvous store would be
server.bind(("127.0.0.1", 0))
server.listen()
open("port", "w").write(str(server.getsockname()[1]))
open("ready", "w").close()
time.sleep(600)
"""


@pytest.fixture
def sandboxed(job_settings, tmp_path):
    status = sandbox.sandbox_status()
    service_required(f"the job sandbox ({status.reason})", status.available)
    # Gantry's data directory (secret key, blob cache) beside the test's, not the checkout's.
    data = tmp_path.parent / f"{tmp_path.name}-data"
    data.mkdir(parents=True, exist_ok=True)
    job_settings.DATA_DIR = data
    return job_settings


def worker_of(job, rank=0):
    return JobWorker.objects.get(job=job, rank=rank)


def in_workdir(job, name):
    worker = worker_of(job)
    return bool(worker.workdir) and os.path.exists(os.path.join(worker.workdir, name))


def status_of(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return fields


def test_a_sandboxed_job_runs_as_its_own_user_in_its_own_namespaces(
    sandboxed, running_jobs, owner, project, tmp_path
):
    waiter = tmp_path / "wait.py"
    waiter.write_text("import os, time\nopen('ready', 'w').close()\ntime.sleep(600)\n")
    job = submit_job(owner, project, name="w", command=f"python {waiter}")
    wait_for(job, "running")
    wait_until(lambda: in_workdir(job, "ready"), what="the job to start")
    worker = worker_of(job)
    wait_until(lambda: worker.refresh_from_db() or worker.child_pid, what="the child's pid")
    pids = [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and process_start_time(int(p)) and _pgid(int(p)) == worker.child_pid
    ]
    python = [p for p in pids if _cmdline(p).split(" ")[0].rsplit("/", 1)[-1].startswith("python")]
    assert python, pids
    seen = status_of(python[0])
    uid = sandbox.job_uid(job)
    # Real, effective, saved and filesystem uid: the job's own, seen from outside.
    assert seen["Uid"] == [str(uid)] * 4 and seen["Gid"] == [str(uid)] * 4
    assert uid != os.getuid()
    assert seen["CapEff"] == ["0000000000000000"] and seen["CapBnd"] == ["0000000000000000"]
    assert seen["NoNewPrivs"] == ["1"]
    assert len(seen["NSpid"]) == 2  # a PID namespace of its own
    assert os.readlink(f"/proc/{python[0]}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    # A network namespace of its own, which its executor (outside it) holds open, and
    # no longer has a name in /run/netns: it ends with the attempt's last process.
    netns = os.readlink(f"/proc/{python[0]}/ns/net")
    assert netns != os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{worker.pid}/ns/net") == os.readlink("/proc/self/ns/net")
    held = [
        os.stat(f"/proc/{worker.pid}/fd/{fd}").st_ino for fd in os.listdir(f"/proc/{worker.pid}/fd")
    ]
    assert os.stat(f"/proc/{python[0]}/ns/net").st_ino in held
    named = [os.stat(f"/run/netns/{n}").st_ino for n in os.listdir("/run/netns")]
    assert os.stat(f"/proc/{python[0]}/ns/net").st_ino not in named
    # Its workdir is its own; the executor's state stays root's.
    workdir = Path(worker.workdir)
    assert workdir.stat().st_uid == uid
    assert (workdir / ".gantry").stat().st_uid == 0
    cancel_job(owner, job)
    wait_for(job, "cancelled")


def _pgid(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_job_of_another_tenant_reaches_nothing_of_tenant_a_or_gantry(
    sandboxed, running_jobs, owner, project, outsider, other_project, tmp_path
):
    settings = sandboxed
    # --- tenant A's data at rest: a dataset blob, a model file, Gantry's secret key ---
    blob = b"tenant A dataset " + secrets.token_hex(8).encode()
    blob_name = default_storage.save("blobs/ab/" + "ab" * 32, ContentFile(blob))
    model = b"tenant A model " + secrets.token_hex(8).encode()
    model_name = default_storage.save("models/a/model.pt", ContentFile(model))
    key = secrets.token_hex(32)
    key_file = Path(settings.DATA_DIR) / "secret_key"
    key_file.write_text(key)
    cache = Path(settings.DATA_DIR) / "cache" / "blobs" / "ab"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / ("ab" * 32)).write_bytes(blob)
    storage = Path(default_storage.path(""))

    # --- tenant A's running work: a train job and a notebook ---
    marker = "tenant A weights " + secrets.token_hex(8)
    victim_py = tmp_path / "victim.py"
    victim_py.write_text(VICTIM.format(marker=marker))
    victim = submit_job(owner, project, name="victim", command=f"python {victim_py}")
    notebook = submit_job(owner, project, kind="notebook", name="lab")
    wait_for(victim, "running")
    wait_for(notebook, "running")
    wait_until(lambda: in_workdir(victim, "ready"), what="tenant A's job")
    victim_worker, lab = worker_of(victim), worker_of(notebook)
    wait_until(
        lambda: (
            victim_worker.refresh_from_db()
            or lab.refresh_from_db()
            or (victim_worker.child_pid and lab.child_pid)
        ),
        what="tenant A's commands",
    )
    lab_target = proxy.resolve_target(notebook)
    wait_until(lambda: _get(lab_target) == 200, what="JupyterLab")
    # Listeners the job must not reach: on the host's loopback, and on every address.
    victim_port = int((Path(victim_worker.workdir) / "port").read_text())
    loopback = _listener("127.0.0.1")
    anywhere = _listener("0.0.0.0")
    host_ip = _host_address()

    # A stand-in for the django-q worker: a process with Gantry's environment.
    worker_secret = "postgres://gantry:" + secrets.token_hex(8) + "@127.0.0.1/gantry"
    qworker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, "DATABASE_URL": worker_secret},
    )
    try:
        victim_dir = Path(victim_worker.workdir)
        targets = {
            "reads": {
                "A's dataset blob in storage": str(storage / blob_name),
                "A's dataset blob in the machine's input cache": str(cache / ("ab" * 32)),
                "A's model file": str(storage / model_name),
                "A's job output in its workdir": str(victim_dir / "outputs" / "weights.bin"),
                "Gantry's secret key": str(key_file),
                "Gantry's database": str(Path(settings.DATA_DIR) / "gantry.sqlite3"),
                "Gantry's code": str(Path(settings.BASE_DIR) / "config" / "settings.py"),
            },
            "lists": {
                "Gantry's data directory": str(settings.DATA_DIR),
                "the jobs' workdirs": str(settings.GANTRY_JOBS_DIR),
                "A's workdir": str(victim_dir),
                "A's notebook's workdir": str(lab.workdir),
                "file storage": str(storage),
                "A's notebook's Jupyter runtime (tokens)": str(
                    Path(lab.workdir) / ".local" / "share" / "jupyter" / "runtime"
                ),
            },
            "environs": {
                "the web process": os.getpid(),
                "the django-q worker": qworker.pid,
                "A's executor": victim_worker.pid,
                "A's job": victim_worker.child_pid,
                "A's notebook server": lab.child_pid,
            },
            "writes": {
                "into Gantry's data directory": str(Path(settings.DATA_DIR) / "pwned"),
                "into A's workdir": str(victim_dir / "pwned"),
                "into file storage": str(storage / "pwned"),
                "into the jobs' directory": str(Path(settings.GANTRY_JOBS_DIR) / "pwned"),
                "into its own scripts (read-only)": str(tmp_path / "pwned"),
                "into the runtime": str(Path(sys.prefix) / "pwned"),
                "into /usr": "/usr/pwned",
                "into /etc": "/etc/pwned",
            },
            "kills": {"A's job": victim_worker.child_pid, "A's executor": victim_worker.pid},
            "probes": {"the web process": os.getpid(), "the django-q worker": qworker.pid},
            "notebook_pid": lab.child_pid,
            "notebook_socket": lab_target.uds,
            "notebook_base": f"/jobs/{notebook.pk}/lab/",
            "connects": {
                # Whatever listens on the host's loopback: here a stand-in, so that the
                # test does not depend on PostgreSQL and Redis running; then their ports.
                "a service on the host's loopback": ("127.0.0.1", loopback.getsockname()[1]),
                "PostgreSQL (127.0.0.1:5432)": ("127.0.0.1", 5432),
                "Redis (127.0.0.1:6379)": ("127.0.0.1", 6379),
                "Gantry's web server": ("127.0.0.1", urlsplit(settings.GANTRY_URL).port),
                "A's job's server on loopback": ("127.0.0.1", victim_port),
                "a service on the host's own address": (host_ip, anywhere.getsockname()[1]),
            },
        }
        (tmp_path / "targets.json").write_text(json.dumps(targets))
        adversary = tmp_path / "adversary.py"
        adversary.write_text(textwrap.dedent(ADVERSARY))

        attack = submit_job(
            outsider,
            other_project,
            name="adversary",
            command=f"python {adversary} {tmp_path / 'targets.json'}",
        )
        wait_for(attack, "succeeded", "failed")
        assert attack.state == "succeeded", (
            attack.state_reason,
            [ln["text"] for ln in log_lines(attack)][-15:],
        )
        report = json.loads(Artifact.objects.get(job=attack, path="report.json").file.read())
        succeeded = [r for r in report if r["outcome"] != "refused"]
        assert succeeded == [], json.dumps(succeeded, indent=1)
        expected = (
            len(targets["reads"])
            + len(targets["lists"])
            + len(targets["environs"])
            + len(targets["writes"])
            + 2 * len(targets["kills"])
            + len(targets["probes"])
            + 2
            + len(targets["connects"])
        )
        assert len(report) == expected
        text = json.dumps(report)
        for secret in (blob.decode(), model.decode(), key, marker, worker_secret):
            assert secret not in text
        assert lab.notebook_token not in text

        # Nothing was written outside its workdir, and tenant A's work runs on.
        for path in targets["writes"].values():
            assert not os.path.exists(path), path
        assert process_start_time(victim_worker.pid) == victim_worker.pid_start_time
        assert process_start_time(victim_worker.child_pid) == victim_worker.child_start_time
        assert status_of(lab.child_pid)["State"][0] != "T"  # not stopped
        assert _get(lab_target) == 200
        # Nothing reached the listeners; the job's own loopback worked, with lo alone.
        for listener in (loopback, anywhere):
            listener.settimeout(0)
            with pytest.raises(BlockingIOError):
                listener.accept()
        stdout = [ln["text"] for ln in log_lines(attack) if ln["stream"] == "stdout"]
        assert "own loopback works" in stdout
        assert "interfaces: ['lo']" in stdout
        victim.refresh_from_db()
        assert victim.state == "running"
        assert (victim_dir / "outputs" / "weights.bin").read_text() == marker
    finally:
        qworker.kill()
        qworker.wait()
        loopback.close()
        anywhere.close()
    cancel_job(owner, victim)
    cancel_job(owner, notebook)
    wait_for(victim, "cancelled")
    wait_for(notebook, "cancelled")


def _get(target):
    """JupyterLab's api/status over its Unix socket, with its token (as the origin)."""
    try:
        answer = lab_get(target, "api/status", headers={"Authorization": f"token {target.token}"})
    except (OSError, httpx.TransportError):
        return None
    return answer.status_code


def _listener(host):
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen()
    return sock


def _host_address():
    """This machine's address on its default route (not loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: a route lookup
            return probe.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


# --- without a sandbox ---------------------------------------------------------------


@pytest.fixture
def unisolated(settings):
    settings.GANTRY_SANDBOX = "off"
    settings.GANTRY_JOB_BACKEND = "local"
    return settings


def test_without_a_sandbox_a_second_tenants_job_is_refused_with_the_reason(
    unisolated, owner, project, outsider, other_project
):
    from django.core.exceptions import ValidationError

    from jobs.models import Job

    first = submit_job(owner, project, name="a", command="python -c pass")
    assert first.state == "queued"  # one tenant: allowed
    with pytest.raises(ValidationError) as refused:
        submit_job(outsider, other_project, name="b", command="python -c pass")
    message = " ".join(refused.value.messages)
    assert "run without isolation" in message
    assert "the sandbox is turned off (GANTRY_SANDBOX=off)" in message
    assert "GANTRY_ALLOW_UNISOLATED_JOBS=true" in message
    assert project.tenant.name not in message  # the other tenant is not named
    assert not Job.objects.filter(project=other_project).exists()

    unisolated.GANTRY_ALLOW_UNISOLATED_JOBS = True
    accepted = submit_job(outsider, other_project, name="b", command="python -c pass")
    assert accepted.state == "queued"


def test_without_a_sandbox_the_api_answers_400_with_the_reason(
    unisolated, api_for, owner, project, outsider, other_project
):
    submit_job(owner, project, name="a", command="python -c pass")
    response = api_for(outsider).post(
        "/api/v1/jobs/", {"project": other_project.pk, "command": "python x.py"}, format="json"
    )
    assert response.status_code == 400
    assert "run without isolation" in response.json()["non_field_errors"][0]


def test_without_a_sandbox_launch_refuses_a_queued_job_of_a_second_tenant(
    unisolated, owner, project, outsider, other_project, job_settings
):
    """A job queued while the sandbox worked, launched after it stopped working."""
    unisolated.GANTRY_ALLOW_UNISOLATED_JOBS = True
    submit_job(owner, project, name="a", command="python -c pass")
    late = submit_job(outsider, other_project, name="b", command="python -c pass")
    unisolated.GANTRY_ALLOW_UNISOLATED_JOBS = False
    from scheduling import tasks

    tasks.admit_and_launch()
    late.refresh_from_db()
    assert late.state == "failed"
    assert "run without isolation" in late.state_reason


def test_system_check_warns_in_plain_words_when_jobs_cannot_be_isolated(unisolated):
    problems = sandbox.check_sandbox()
    assert [p.id for p in problems] == ["jobs.W020"]
    assert "Jobs run without isolation" in problems[0].msg
    assert "GANTRY_SANDBOX=off" in problems[0].msg

    unisolated.GANTRY_SANDBOX = "required"
    unisolated.GANTRY_JOB_READ_ONLY_PATHS = [str(unisolated.DATA_DIR)]
    sandbox._probe.cache_clear()
    ids = sorted(p.id for p in sandbox.check_sandbox())
    if sandbox.sandbox_status().available:
        assert ids == ["jobs.E020"]  # the data directory may never be shown to jobs
    else:
        assert ids == ["jobs.E020", "jobs.E021"]


def test_cluster_page_says_when_jobs_are_not_isolated(unisolated, client_for, owner, tenant):
    client = client_for(owner)
    from django.urls import reverse

    page = client.get(reverse("scheduling:overview")).content.decode()
    assert "Jobs on this machine are not isolated" in page
    assert "the sandbox is turned off (GANTRY_SANDBOX=off)" in page


# --- what a worker is given ----------------------------------------------------------


def test_a_gpu_worker_gets_its_own_nodes_and_the_control_nodes_only(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / name).touch()
    dev = str(tmp_path)
    assert sandbox.gpu_devices([1], dev=dev) == [
        f"{dev}/nvidia1",
        f"{dev}/nvidiactl",
        f"{dev}/nvidia-uvm",
        f"{dev}/nvidia-modeset",
    ]
    assert sandbox.gpu_devices([], dev=dev) == []  # a CPU-only worker sees no GPU at all


def test_a_gpu_worker_sees_its_own_mig_instances_and_pci_device_only(tmp_path):
    """The driver's files as a machine with two GPUs in MIG mode writes them (fake tree)."""
    proc, sysfs, dev = tmp_path / "proc", tmp_path / "sys", tmp_path / "dev"
    for bdf, minor in (("0000:3b:00.0", 0), ("0000:86:00.0", 1)):
        info = proc / "gpus" / bdf / "information"
        info.parent.mkdir(parents=True)
        info.write_text(f"Model: \t\t NVIDIA H100\nBus Location: \t {bdf}\nDevice Minor: \t {minor}\n")
        folder = sysfs / "devices" / f"pci0000:{bdf[5:7]}" / bdf
        folder.mkdir(parents=True)
        (sysfs / "bus/pci/devices").mkdir(parents=True, exist_ok=True)
        (sysfs / "bus/pci/devices" / bdf).symlink_to(f"../../../devices/pci0000:{bdf[5:7]}/{bdf}")
    caps = proc / "capabilities"
    for rel, minor in (
        ("mig/config", 1), ("mig/monitor", 2),  # MIG's own: reconfigure, see everything
        ("gpu0/mig/gi1/access", 12), ("gpu0/mig/gi1/ci0/access", 13),
        ("gpu1/mig/gi2/access", 21), ("gpu1/mig/gi2/ci0/access", 22),
    ):
        (caps / rel).parent.mkdir(parents=True, exist_ok=True)
        (caps / rel).write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\n")
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).parent.mkdir(exist_ok=True)
        (dev / name).touch()
    assert sandbox.gpu_devices([0], dev=str(dev), proc=str(proc)) == [
        f"{dev}/nvidia0",
        f"{dev}/nvidiactl",
        f"{dev}/nvidia-uvm",
        f"{dev}/nvidia-caps/nvidia-cap12",  # its GPU instance and compute instance only
        f"{dev}/nvidia-caps/nvidia-cap13",
    ]
    from core.nvml import gpu_sysfs

    assert gpu_sysfs([0], sysfs=str(sysfs), proc=str(proc)) == [
        "/sys/devices/system/cpu",
        "/sys/devices/system/node",
        str(sysfs / "devices/pci0000:3b/0000:3b:00.0"),
        str(sysfs / "bus/pci/devices/0000:3b:00.0"),
    ]
    assert gpu_sysfs([], sysfs=str(sysfs), proc=str(proc)) == [
        "/sys/devices/system/cpu",
        "/sys/devices/system/node",
    ]


def test_a_workers_sandbox_shows_its_runtime_but_never_gantrys_data(settings, tmp_path):
    import types

    settings.GANTRY_JOB_READ_ONLY_PATHS = [str(tmp_path), str(settings.DATA_DIR)]
    job = types.SimpleNamespace(pk=70_000, memory_mb=512, cpus=2)
    spec = json.loads(sandbox.worker_sandbox(job, sys.executable, [], None))
    assert spec["uid"] == spec["gid"] == settings.GANTRY_SANDBOX_UID_BASE + 70_000 % (65_536 - 1024)
    assert str(Path(sys.prefix).resolve()) in spec["read_only"]  # the virtualenv
    assert str(tmp_path) in spec["read_only"]
    assert str(settings.DATA_DIR) not in spec["read_only"]
    assert spec["devices"] == [] and "shm" not in spec
    # Of /sys, a CPU-only worker sees the CPU and NUMA topology alone.
    assert spec["sys"] == ["/sys/devices/system/cpu", "/sys/devices/system/node"]
    if sandbox.sandbox_status().limits:  # its request, and the installation's quotas
        assert spec["limits"] == {
            "memory_bytes": 512 * 1024 * 1024,
            "pids": settings.GANTRY_JOB_MAX_PROCESSES,
            "cpus": 2,
            "disk_bytes": settings.GANTRY_JOB_DISK_MB * 1024 * 1024,
        }
    for exposed in (settings.DATA_DIR, settings.BASE_DIR, "/", Path(settings.DATA_DIR) / "files"):
        assert sandbox.exposes_gantry(exposed), exposed
    assert not sandbox.exposes_gantry(Path(settings.BASE_DIR) / "examples")


def test_a_sandboxed_job_reads_its_dataset_input_but_cannot_change_the_cached_blob(
    sandboxed, running_jobs, owner, project, tmp_path
):
    from datasets.services.catalog import create_dataset
    from tests.datasets.builders import upload_files

    dataset = create_dataset(owner, project, name="Digits", slug="digits")
    upload_files(owner, dataset, {"train/a.txt": b"one"})
    reader = tmp_path / "reader.py"
    reader.write_text(
        textwrap.dedent(
            """
            import os
            path = "data/digits/train/a.txt"
            print("read", open(path).read())
            try:
                open(path, "a").write("changed")
                print("appended")
            except OSError as exc:
                print("refused", exc.errno)
            """
        )
    )
    job = submit_job(
        owner, project, name="r", command=f"python {reader}", inputs=[{"dataset": "digits"}]
    )
    wait_for(job, "succeeded", "failed")
    assert job.state == "succeeded", [ln["text"] for ln in log_lines(job)][-10:]
    stdout = [ln["text"] for ln in log_lines(job) if ln["stream"] == "stdout"]
    assert stdout == ["read one", "refused 13"]  # EACCES: root's read-only file
    blobs = list((Path(sandboxed.DATA_DIR) / "cache" / "blobs").glob("*/*"))
    assert [b.read_bytes() for b in blobs if not b.name.endswith(".lock")] == [b"one"]


def test_gantry_appends_to_an_executor_log_only_if_it_is_still_its_own(tmp_path):
    """A relaunch after preemption reuses the workdir the job owned: whatever the job put
    at executor.log is replaced, never followed (a link to the secret key, a FIFO)."""
    from jobs.compute.local import _open_log

    canary = tmp_path / "secret_key"
    canary.write_text("key")
    log = tmp_path / "executor.log"
    log.symlink_to(canary)
    with _open_log(log) as fh:
        fh.write(b"line\n")
    assert canary.read_text() == "key"
    assert not log.is_symlink() and log.read_bytes() == b"line\n"

    log.unlink()
    os.mkfifo(log)
    with _open_log(log) as fh:  # does not block on a FIFO nobody reads
        fh.write(b"again\n")
    assert log.read_bytes() == b"again\n"

    if os.geteuid() == 0:
        os.chown(log, 200_001, 200_001)  # the job's own file: not appended to
        with _open_log(log) as fh:
            fh.write(b"fresh\n")
        assert log.stat().st_uid == 0 and log.read_bytes() == b"fresh\n"


# --- GPUs by UUID ------------------------------------------------------------------------
# No GPU here: NVML and nvidia-smi are stood in for, as a GPU machine answers them.

UUIDS = ["GPU-0aa1c3e4-0000-4000-8000-000000000000", "GPU-1bb2d4f5-1111-4111-8111-111111111111"]


def _gpu_job(gpus):
    import types

    return types.SimpleNamespace(
        env={}, parameters={}, cpus=1, kind="train", placement={"gpus": {"0": gpus}}
    )


def _fake_smi(tmp_path, monkeypatch, lines):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text('#!/bin/sh\necho "$@" >> "$0.args"\ncat <<\'EOF\'\n' + lines + "EOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: nvidia-smi is asked
    return smi


def test_cuda_visible_devices_names_the_assigned_gpus_by_uuid_from_nvidia_smi(
    settings, tmp_path, monkeypatch
):
    from jobs.compute.local import LocalBackend

    settings.GANTRY_LOCAL_FAKE_GPUS = 0
    smi = _fake_smi(tmp_path, monkeypatch, f"0, {UUIDS[0]}\n1, {UUIDS[1]}\n2, GPU-2\n")
    env = LocalBackend().environment(_gpu_job([1, 0]), types_worker())
    # Host index 1 may be device 0 inside the sandbox (only its node exists there).
    assert env["CUDA_VISIBLE_DEVICES"] == f"{UUIDS[1]},{UUIDS[0]}"
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
    assert "--query-gpu=index,uuid" in (tmp_path / "bin" / "nvidia-smi.args").read_text()
    # An index nvidia-smi does not list: indices, never a partial list.
    assert LocalBackend().gpu_names([1, 5]) == ["1", "5"]
    # A CPU-only worker: no GPU at all.
    assert LocalBackend().environment(_gpu_job([]), types_worker())["CUDA_VISIBLE_DEVICES"] == ""
    smi.unlink()  # neither NVML nor nvidia-smi: indices
    assert LocalBackend().gpu_names([1]) == ["1"]


def test_cuda_visible_devices_takes_uuids_from_nvml_first(settings, monkeypatch):
    import types

    from jobs.compute.local import LocalBackend

    settings.GANTRY_LOCAL_FAKE_GPUS = 0
    calls = []
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetUUID=lambda h: UUIDS[h[1]].encode(),  # older bindings give bytes
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert LocalBackend().gpu_names([1]) == [UUIDS[1]]
    assert calls == ["init", "shutdown"]
    settings.GANTRY_LOCAL_FAKE_GPUS = 2  # the tests' bookkeeping GPUs have no UUID
    assert LocalBackend().gpu_names([1]) == ["1"]


def types_worker(rank=0):
    import types

    return types.SimpleNamespace(rank=rank, notebook_token="")


RENDEZVOUS = r"""
import os, socket, time
port = int(os.environ["MASTER_PORT"])
print("netns", os.readlink("/proc/self/ns/net"))
if os.environ["RANK"] == "0":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    server.settimeout(120)
    conn, _ = server.accept()
    print("rank 0 got", conn.recv(100).decode())
else:
    for _ in range(600):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            time.sleep(0.2)
    sock.sendall(b"hello from rank 1")
"""


def test_the_workers_of_one_job_share_a_loopback_no_one_else_has(
    sandboxed, running_jobs, owner, project, tmp_path
):
    script = tmp_path / "rendezvous.py"
    script.write_text(RENDEZVOUS)
    job = submit_job(
        owner, project, kind="distributed", workers=2, name="gang", command=f"python {script}"
    )
    wait_for(job, "succeeded", "failed")
    lines = [(ln["worker"], ln["text"]) for ln in log_lines(job) if ln["stream"] == "stdout"]
    assert job.state == "succeeded", (job.state_reason, lines)
    assert (0, "rank 0 got hello from rank 1") in lines
    namespaces = {text for _, text in lines if text.startswith("netns ")}
    assert len(namespaces) == 1, lines  # one namespace for both workers
    assert namespaces != {"netns " + os.readlink("/proc/self/ns/net")}  # not the host's


def test_a_namespace_name_left_by_a_crashed_launch_is_removed():
    status = sandbox.sandbox_status()
    service_required(f"the job sandbox ({status.reason})", status.available)
    name = sandbox.namespace_name(99_999, 1)
    assert sandbox.parse_namespace_name(name) == (99_999, 1)
    assert sandbox.parse_namespace_name("gantry-probe-12") is None
    path = sandbox.create_namespace(name, status.ip)
    try:
        assert name not in sandbox.sweep_namespaces()  # a launch in progress keeps it
        age = time.time() - os.lstat(path).st_mtime
        assert name in sandbox.sweep_namespaces(older_than=age - 0.001)
        assert not os.path.exists(path)
    finally:
        sandbox.delete_namespace(name, status.ip)


@pytest.mark.parametrize("count", [65_536, 3000, 2])
def test_job_and_helper_server_uids_never_meet(settings, count):
    """An endpoint's replicas (server_uid) and jobs (job_uid) take disjoint bands of the
    sandbox range, however high job ids climb: the old formulas (replicas counting down
    from the top, jobs wrapping up from the bottom) met at job id count-1-endpoint id."""
    import types

    settings.GANTRY_SANDBOX_UID_COUNT = count
    base = settings.GANTRY_SANDBOX_UID_BASE
    servers = {sandbox.server_uid(key) for key in range(1, 5000)}
    jobs = {sandbox.job_uid(types.SimpleNamespace(pk=pk)) for pk in range(1, 200_000, 13)}
    assert servers.isdisjoint(jobs)
    assert all(base <= uid < base + count for uid in servers | jobs)
    assert len(servers) == min(1024, count // 2)
