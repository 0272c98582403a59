"""The executor's sandbox pieces on their own: the spec, the bwrap argv, the workdir
handed to the job's user. (Jobs really running sandboxed: tests/jobs/test_isolation.py.)"""

import json
import os
import shutil
import subprocess

import pytest

from executor.sandbox import (
    PYTHONPATH,
    WORKDIR,
    SandboxError,
    bwrap_argv,
    inside,
    parse_spec,
    prepare_workdir,
    sandbox_env,
)
from tests.conftest import service_required

SPEC = {
    "bwrap": "/usr/bin/bwrap",
    "setpriv": "/usr/bin/setpriv",
    "uid": 200007,
    "gid": 200007,
    "read_only": ["/opt/venv", "/srv/code"],
    "devices": ["/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"],
}


def argv_for(spec=SPEC, command=("python", "train.py")):
    return bwrap_argv(
        parse_spec(json.dumps(spec)),
        list(command),
        workdir="/data/jobs/7/attempt-1/worker-0",
        state_dir="/data/jobs/7/attempt-1/worker-0/.gantry",
        metrics_file="/data/jobs/7/attempt-1/worker-0/.gantry/metrics-w0.jsonl",
        executor_package="/srv/gantry/executor",
    )


def mounts(argv):
    """(option, source, destination) of every mount, in order."""
    found, i = [], 0
    two = {"--bind", "--ro-bind", "--ro-bind-try", "--dev-bind-try", "--symlink"}
    one = {"--proc", "--dev", "--tmpfs", "--dir"}
    while i < len(argv):
        if argv[i] == "--":
            break
        if argv[i] in two:
            found.append((argv[i], argv[i + 1], argv[i + 2]))
            i += 3
        elif argv[i] in one:
            found.append((argv[i], None, argv[i + 1]))
            i += 2
        else:
            i += 1
    return found


def test_the_command_runs_after_setpriv_drops_to_the_jobs_user():
    argv = argv_for()
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert flag in argv
    assert "--unshare-net" not in argv  # workers rendezvous over loopback
    assert "--new-session" not in argv  # the executor signals the command's process group
    tail = argv[argv.index("--") + 1 :]
    assert tail == [
        "/usr/bin/setpriv",
        "--reuid=200007",
        "--regid=200007",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        "python",
        "train.py",
    ]


def test_only_the_assigned_gpu_nodes_are_bound():
    devices = [m for m in mounts(argv_for()) if m[0] == "--dev-bind-try"]
    assert devices == [
        ("--dev-bind-try", "/dev/nvidia3", "/dev/nvidia3"),
        ("--dev-bind-try", "/dev/nvidiactl", "/dev/nvidiactl"),
        ("--dev-bind-try", "/dev/nvidia-uvm", "/dev/nvidia-uvm"),
    ]
    cpu_only = [m for m in mounts(argv_for({**SPEC, "devices": []})) if m[0] == "--dev-bind-try"]
    assert cpu_only == []


def test_the_workdir_is_at_job_with_the_executors_state_read_only_over_it():
    found = mounts(argv_for())
    binds = [m for m in found if m[0] in ("--bind", "--ro-bind")]
    assert binds[-3:] == [
        ("--bind", "/data/jobs/7/attempt-1/worker-0", WORKDIR),
        ("--ro-bind", "/data/jobs/7/attempt-1/worker-0/.gantry", WORKDIR + "/.gantry"),
        (
            "--bind",
            "/data/jobs/7/attempt-1/worker-0/.gantry/metrics-w0.jsonl",
            WORKDIR + "/.gantry/metrics-w0.jsonl",
        ),
    ]
    assert ("--ro-bind", "/srv/gantry/executor", PYTHONPATH + "/executor") in found
    assert ("--ro-bind-try", "/opt/venv", "/opt/venv") in found
    destinations = [m[2] for m in found]
    # Nothing of the host's data is mounted: only /usr, /etc files, /sys, the runtime.
    assert not any(d.startswith("/data") for d in destinations)
    assert not any(m[1] == "/etc" or m[2] == "/etc" for m in found if m[0] != "--dir")
    assert ("--ro-bind-try", "/etc/shadow", "/etc/shadow") not in found
    assert ("--tmpfs", None, "/tmp") in found and ("--proc", None, "/proc") in found


def test_tmp_and_shm_are_the_jobs_own_and_writable_and_sys_shows_the_topology_only():
    argv = argv_for()
    for path in ("/tmp", "/dev/shm"):  # sticky and writable by all, as on a host
        i = argv.index(path)
        assert argv[i - 3 : i] == ["--perms", "1777", "--tmpfs"]
    sys_mounts = [m for m in mounts(argv) if m[2].startswith("/sys")]
    assert sys_mounts == [
        ("--dir", None, "/sys"),
        ("--dir", None, "/sys/devices"),
        ("--dir", None, "/sys/devices/system"),
        ("--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"),
        ("--ro-bind-try", "/sys/devices/system/node", "/sys/devices/system/node"),
    ]


def test_a_gpu_jobs_pci_device_link_is_made_again_as_a_link(tmp_path, monkeypatch):
    device = "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
    link = "/sys/bus/pci/devices/0000:3b:00.0"
    target = "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
    monkeypatch.setattr(os.path, "islink", lambda p: p == link)
    monkeypatch.setattr(os, "readlink", lambda p: target if p == link else p)
    found = mounts(argv_for({**SPEC, "sys": ["/sys/devices/system/cpu", device, link]}))
    assert ("--ro-bind-try", device, device) in found
    assert ("--symlink", target, link) in found


def test_parents_of_mount_points_are_made_walkable():
    argv = argv_for()
    i = argv.index("/opt/venv")
    before = argv[:i]
    assert before[-5:] == ["--perms", "0755", "--dir", "/opt", "--ro-bind-try"]


def test_a_bad_spec_is_refused_with_its_reason():
    assert parse_spec("") is None
    for raw, words in (
        ("{", "not JSON"),
        ("[]", "JSON object"),
        (json.dumps({**SPEC, "uid": 0}), "uid must be a positive integer"),
        (json.dumps({**SPEC, "gid": True}), "gid must be a positive integer"),
        (json.dumps({**SPEC, "bwrap": "bwrap"}), "bwrap must be an absolute path"),
        (json.dumps({**SPEC, "read_only": ["relative"]}), "read_only must be a list"),
        (json.dumps({**SPEC, "shm": 3}), "shm must be an absolute path"),
        (json.dumps({**SPEC, "sys": ["/etc/shadow"]}), "sys must be a list of paths under /sys"),
        (json.dumps({**SPEC, "sys": ["/sys/../etc"]}), "sys must be a list of paths under /sys"),
        (json.dumps({**SPEC, "limits": {"pids": 64}}), "limits: memory_bytes must be"),
    ):
        with pytest.raises(SandboxError, match=words):
            parse_spec(raw)


def test_paths_handed_to_the_command_are_translated_and_platform_ones_dropped():
    workdir = "/data/jobs/7/attempt-1/worker-0"
    env = sandbox_env(
        {
            "GANTRY_OUTPUTS_DIR": workdir + "/outputs",
            "GANTRY_METRICS_FILE": workdir + "/.gantry/metrics-w0.jsonl",
            "GANTRY_CACHE_DIR": "/data/cache/blobs",
            "HOME": "/root",
            "PYTHONPATH": "/data/jobs/_pythonpath",
        },
        {},
        workdir,
    )
    assert env["GANTRY_OUTPUTS_DIR"] == "/job/outputs"
    assert env["GANTRY_METRICS_FILE"] == "/job/.gantry/metrics-w0.jsonl"
    assert "GANTRY_CACHE_DIR" not in env
    assert env["HOME"] == "/job" and env["TMPDIR"] == "/tmp"
    assert env["PYTHONPATH"] == PYTHONPATH
    own = sandbox_env({"PYTHONPATH": "/x"}, {"PYTHONPATH": "/x"}, workdir)
    assert own["PYTHONPATH"] == "/x"  # the job's own choice stands
    with pytest.raises(ValueError):
        inside("/elsewhere", workdir)


def test_the_workdir_goes_to_the_jobs_user_but_read_only_inputs_and_state_stay_roots(tmp_path):
    service_required("root (to hand files to another uid)", os.geteuid() == 0)
    workdir = tmp_path / "w"
    (workdir / ".gantry" / "spool").mkdir(parents=True)
    metrics = workdir / ".gantry" / "metrics-w0.jsonl"
    metrics.touch()
    (workdir / "executor.log").write_text("log")
    (workdir / "data").mkdir()
    writable = workdir / "data" / "copy.csv"
    writable.write_text("a")
    cached = tmp_path / "cache-blob"
    cached.write_text("blob")
    cached.chmod(0o444)
    os.link(cached, workdir / "data" / "linked.csv")  # a read-only input from the cache
    outside = tmp_path / "outside"
    outside.write_text("x")
    (workdir / "link").symlink_to(outside)

    prepare_workdir(str(workdir), str(workdir / ".gantry"), str(metrics), 200007, 200007, None)

    assert workdir.stat().st_uid == 200007
    assert (workdir / "data").stat().st_uid == 200007
    assert writable.stat().st_uid == 200007
    assert cached.stat().st_uid == 0  # the cache's blob is untouched
    assert (workdir / "executor.log").stat().st_uid == 0
    assert (workdir / ".gantry").stat().st_uid == 0
    assert (workdir / ".gantry" / "spool").stat().st_mode & 0o777 == 0o700
    assert metrics.stat().st_uid == 200007
    assert outside.stat().st_uid == 0  # the symlink was not followed


def test_a_sandboxed_command_cannot_write_the_executors_state(tmp_path):
    service_required("bubblewrap run as root", shutil.which("bwrap") and os.geteuid() == 0)
    workdir = tmp_path / "w"
    (workdir / ".gantry").mkdir(parents=True)
    metrics = workdir / ".gantry" / "metrics-w0.jsonl"
    metrics.touch()
    prepare_workdir(str(workdir), str(workdir / ".gantry"), str(metrics), 200008, 200008, None)
    script = (
        "import os\n"
        "open('/job/mine', 'w').write('ok')\n"
        "open('/job/.gantry/metrics-w0.jsonl', 'a').write('{}\\n')\n"
        "for attempt in (lambda: open('/job/.gantry/preempt', 'w'),\n"
        "                lambda: os.rename('/job/.gantry', '/job/moved')):\n"
        "    try:\n"
        "        attempt()\n"
        "        print('allowed')\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
    )
    spec = {**SPEC, "uid": 200008, "gid": 200008, "devices": [], "read_only": []}
    argv = bwrap_argv(
        parse_spec(json.dumps(spec)),
        ["/usr/bin/python3", "-c", script],
        workdir=str(workdir),
        state_dir=str(workdir / ".gantry"),
        metrics_file=str(metrics),
        executor_package=os.path.dirname(os.path.abspath(__import__("executor").__file__)),
    )
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["refused 30", "refused 16"]  # EROFS, EBUSY
    assert (workdir / "mine").read_text() == "ok"
    assert metrics.read_text() == "{}\n"


# --- the network namespace -------------------------------------------------------------


def test_the_command_enters_the_inherited_network_namespace_before_bwrap(tmp_path):
    service_required("ip netns (root, iproute2)", shutil.which("ip") and os.geteuid() == 0)
    name = f"gantry-test-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)
    try:
        spec = {**SPEC, "netns_fd": fd, "nsenter": "/usr/bin/nsenter"}
        argv = argv_for(spec)
        assert argv[:4] == [
            "/usr/bin/nsenter",
            f"--net=/proc/{os.getpid()}/fd/{fd}",
            "--",
            "/usr/bin/bwrap",
        ]
        # nsenter, without --fork for a network namespace, execs bwrap in its own pid.
        assert "-F" not in argv[:3] and "--fork" not in argv[:3]
        # The namespace lives while the descriptor is held, its name already gone.
        inside = subprocess.run(
            ["nsenter", f"--net=/proc/self/fd/{fd}", "cat", "/proc/net/dev"],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert sorted(
            line.split(":")[0].strip() for line in inside.splitlines() if ":" in line
        ) == ["lo"]
    finally:
        os.close(fd)


def test_a_descriptor_that_is_not_a_separate_network_namespace_stops_the_start(tmp_path):
    host = os.open("/proc/self/ns/net", os.O_RDONLY)
    mounts_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    plain = os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT)
    try:
        for fd, words in (
            (host, "is the host's"),  # never the host's network
            (mounts_ns, "not a network namespace"),
            (plain, "not the job's network namespace"),
        ):
            with pytest.raises(OSError, match=words):
                argv_for({**SPEC, "netns_fd": fd, "nsenter": "/usr/bin/nsenter"})
        closed = plain
        os.close(plain)
        plain = None
        with pytest.raises(OSError, match="not the job's network namespace"):
            argv_for({**SPEC, "netns_fd": closed, "nsenter": "/usr/bin/nsenter"})
    finally:
        for fd in (host, mounts_ns, plain):
            if fd is not None:
                os.close(fd)


def test_a_bad_network_namespace_spec_is_refused():
    for extra, words in (
        ({"netns_fd": 5}, "netns_fd and nsenter go together"),
        ({"nsenter": "/usr/bin/nsenter"}, "netns_fd and nsenter go together"),
        ({"netns_fd": 1, "nsenter": "/usr/bin/nsenter"}, "descriptor number"),
        ({"netns_fd": "5", "nsenter": "/usr/bin/nsenter"}, "descriptor number"),
        ({"netns_fd": 5, "nsenter": "nsenter"}, "nsenter must be an absolute path"),
    ):
        with pytest.raises(SandboxError, match=words):
            parse_spec(json.dumps({**SPEC, **extra}))


def test_a_typo_in_a_sandboxed_command_reads_command_not_found(tmp_path):
    # setpriv, the sandbox's last step, execs the command: its complaint is what the job's
    # reason is made from ("command not found: pyhton", not "exited with code 127").
    from executor.runner import EXEC_FAILED, _exec_reason

    service_required("bubblewrap run as root", shutil.which("bwrap") and os.geteuid() == 0)
    workdir = tmp_path / "w"
    (workdir / ".gantry").mkdir(parents=True)
    metrics = workdir / ".gantry" / "metrics-w0.jsonl"
    metrics.touch()
    prepare_workdir(str(workdir), str(workdir / ".gantry"), str(metrics), 200009, 200009, None)
    spec = {**SPEC, "uid": 200009, "gid": 200009, "devices": [], "read_only": []}
    argv = bwrap_argv(
        parse_spec(json.dumps(spec)),
        ["pyhton", "train.py"],
        workdir=str(workdir),
        state_dir=str(workdir / ".gantry"),
        metrics_file=str(metrics),
        executor_package=os.path.dirname(os.path.abspath(__import__("executor").__file__)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"})
    assert done.returncode == 127
    line = done.stderr.splitlines()[0]
    assert line.startswith(EXEC_FAILED)
    assert _exec_reason(line[len(EXEC_FAILED):]) == "command not found: pyhton"
    assert _exec_reason("train.sh: Permission denied") == "cannot run train.sh: Permission denied"
