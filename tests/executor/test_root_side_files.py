"""The executor touches a job's files only through descriptors that cannot leave its
workdir (executor/safefs.py), even while the job swaps folders for links (issue 38).

Each attack a hostile tenant's job ran against the root-side executor is replayed on a
real filesystem: the job's links and a real racing process. What stands in is the Gantry
server only (`Recorder` answers the executor's HTTP calls and keeps every byte the
executor read and sent), since the question is what root reads and writes on this machine.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executor.checkpoints import MARKER, CheckpointAgent
from executor.outputs import upload_outputs
from executor.safefs import Dir, UnsafePath
from executor.staging import StagingError, stage_inputs

HOST_SECRET = b"HOST-SECRET: another tenant's weights"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Response(io.BytesIO):
    pass


class Recorder:
    """The server side of the executor's client: announcements, uploads, downloads."""

    def __init__(self, downloads: dict[str, bytes] | None = None, latest: dict | None = None) -> None:
        self.announced: list[dict] = []
        self.uploaded: dict[str, bytes] = {}
        self.downloads = downloads or {}
        self.latest = latest
        self.deadline = None
        self.fatal = None

    # -- what the executor calls
    def url(self, path: str) -> str:
        return path

    def resolve(self, url: str) -> str:
        return url

    def same_origin(self, url: str) -> bool:
        return True

    def retrying(self, op, label, interrupted=None, deadline=None):
        return op()

    def open(self, method, url, **kwargs):
        if url == "checkpoints/latest":
            return _Response(json.dumps({"checkpoint": self.latest}).encode())
        return _Response(self.downloads[url])

    def json(self, method, path, body=None, **kwargs):
        if path == "checkpoints":
            self.announced.append(body)
            return {"id": len(self.announced), "state": "pending", "missing": [f["path"] for f in body["files"]]}
        return {}

    def put_file(self, path, open_file, size, headers):
        with open_file() as fh:
            self.uploaded[path] = fh.read()

    # -- what the tests look at
    def every_byte(self) -> bytes:
        return b"".join(self.uploaded.values())

    def every_hash(self) -> set[str]:
        return {f["sha256"] for body in self.announced for f in body["files"]}


def agent(server: Recorder, workdir: Path, logs: list[str]) -> CheckpointAgent:
    (workdir / ".gantry").mkdir(parents=True, exist_ok=True)
    return CheckpointAgent(server, str(workdir), 0, logs.append, sandboxed=None)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another tenant's checkpoint folder on the host, complete, as the job saw its path
    in /proc/self/mountinfo."""
    folder = tmp_path / "tenant-a" / "checkpoints" / "step-000000100"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(HOST_SECRET)
    (folder / MARKER).write_text('{"step": 100}')
    return folder


def test_a_checkpoint_folder_that_links_to_another_tenants_checkpoint_is_not_uploaded(tmp_path, victim):
    work = tmp_path / "tenant-b-job"
    (work / "checkpoints").mkdir(parents=True)
    (work / "checkpoints" / "steal").symlink_to(victim)
    own = work / "checkpoints" / "mine"
    own.mkdir()
    (own / "w.bin").write_bytes(b"mine")
    (own / "evil").symlink_to(victim / "weights.bin")  # a link to a file, inside a real folder
    (own / MARKER).write_text("{}")
    server, logs = Recorder(), []

    agent(server, work, logs).scan()

    assert [body["name"] for body in server.announced] == ["mine"]
    assert [f["path"] for f in server.announced[0]["files"]] == ["w.bin"]
    assert HOST_SECRET not in server.every_byte() and sha(HOST_SECRET) not in server.every_hash()
    assert any("'steal' ignored" in line for line in logs)


def test_the_checkpoints_folder_itself_a_link_is_not_read(tmp_path, victim):
    work = tmp_path / "job"
    work.mkdir()
    (work / "checkpoints").symlink_to(victim.parent)
    server = Recorder()

    agent(server, work, []).scan()

    assert server.announced == [] and server.uploaded == {}


SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    a, b, seconds = sys.argv[1].encode(), sys.argv[2].encode(), float(sys.argv[3])
    end = time.monotonic() + seconds
    swaps = 0
    print("ready", flush=True)
    while time.monotonic() < end:
        if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
            swaps += 1
    print(swaps)
    """
)


def test_a_job_swapping_a_checkpoint_folder_with_a_link_never_makes_root_read_host_files(tmp_path, victim):
    # The attack: renameat2(RENAME_EXCHANGE) of a real folder and a link to the host, in a
    # loop, while the executor lists, hashes and uploads. Checked by name, then opened by
    # name, the executor read the host's file in 17 of 30 attempts within 60 s.
    assert ctypes.CDLL(None).renameat2  # glibc >= 2.28
    work = tmp_path / "job"
    folder = work / "checkpoints" / "c"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "weights.bin").write_bytes(b"the job's own weights")
    (folder / "swap").symlink_to(victim)
    (folder / MARKER).write_text("{}")
    server, logs = Recorder(), []
    checkpoints = agent(server, work, logs)
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(folder / "data"), str(folder / "swap"), "3"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert swapper.stdout.readline().strip() == "ready"
        scans = 0
        while swapper.poll() is None:  # bounded: the swapper stops itself after 3 s
            checkpoints.done.discard("c")
            checkpoints.scan()
            scans += 1
        swaps = int(swapper.stdout.read().strip())
    finally:
        swapper.kill()
        swapper.wait()
    assert scans > 10 and swaps > 1000, (scans, swaps)
    assert HOST_SECRET not in server.every_byte()
    assert sha(HOST_SECRET) not in server.every_hash()
    assert (victim / "weights.bin").read_bytes() == HOST_SECRET


def test_a_checkpoints_link_left_for_a_relaunch_makes_root_change_nothing_on_the_host(tmp_path, victim):
    # After a preemption the workdir is reused: a job that replaced `checkpoints` with a
    # link to a host folder must not have root delete or replace files there.
    work = tmp_path / "job"
    work.mkdir()
    host = victim.parent
    (host / "step-000000200").mkdir()
    (host / "step-000000200" / "keep.bin").write_bytes(b"keep")
    (work / "checkpoints").symlink_to(host)
    before = sorted(str(p.relative_to(host)) for p in host.rglob("*"))
    data = b"resumed weights"
    latest = {"id": 7, "name": "step-000000200", "step": 200,
              "files": [{"path": "w.bin", "size": len(data), "sha256": sha(data)}]}
    server = Recorder({"checkpoints/7/files/w.bin": data}, latest)

    with pytest.raises(StagingError, match="refused"):
        agent(server, work, []).stage(lambda: False, None)

    assert sorted(str(p.relative_to(host)) for p in host.rglob("*")) == before
    assert (host / "step-000000200" / "keep.bin").read_bytes() == b"keep"


def test_a_checkpoint_name_that_is_a_link_is_replaced_as_a_link_on_resume(tmp_path, victim):
    work = tmp_path / "job"
    (work / "checkpoints").mkdir(parents=True)
    (work / "checkpoints" / "step-000000200").symlink_to(victim)  # the name about to be staged
    (work / "checkpoints" / ".staging-step-000000200").symlink_to(victim)
    data = b"resumed weights"
    latest = {"id": 7, "name": "step-000000200", "step": 200,
              "files": [{"path": "sub/w.bin", "size": len(data), "sha256": sha(data)}]}
    server = Recorder({"checkpoints/7/files/sub/w.bin": data}, latest)

    agent(server, work, []).stage(lambda: False, None)

    staged = work / "checkpoints" / "step-000000200"
    assert not staged.is_symlink() and (staged / "sub" / "w.bin").read_bytes() == data
    assert sorted(p.name for p in victim.iterdir()) == [MARKER, "weights.bin"]
    assert (victim / "weights.bin").read_bytes() == HOST_SECRET


def test_inputs_are_never_staged_through_a_link_the_job_left(tmp_path, victim, monkeypatch):
    monkeypatch.setenv("GANTRY_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "job"
    work.mkdir()
    (work / "data").symlink_to(victim.parent)
    data = b"a,b\n"
    inputs = [{"mount": "data/ds", "files": [{"path": "train.csv", "url": "blob/1", "size": len(data), "sha256": sha(data)}]}]

    with pytest.raises(StagingError, match="symbolic link"):
        stage_inputs(Recorder({"blob/1": data}), str(work), inputs, lambda m: None, lambda: False, None)

    assert not (victim.parent / "ds").exists()


def test_an_input_file_name_taken_by_a_link_is_replaced_not_written_through(tmp_path, victim, monkeypatch):
    monkeypatch.setenv("GANTRY_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "job"
    (work / "data").mkdir(parents=True)
    (work / "data" / "weights.bin").symlink_to(victim / "weights.bin")
    (work / "data" / ".weights.bin.part").symlink_to(victim / "weights.bin")
    data = b"input bytes"
    for read_only in (False, True):
        inputs = [{"mount": "data", "read_only": read_only,
                   "files": [{"path": "weights.bin", "url": "blob/1", "size": len(data), "sha256": sha(data)}]}]
        stage_inputs(Recorder({"blob/1": data}), str(work), inputs, lambda m: None, lambda: False, None)
        staged = work / "data" / "weights.bin"
        assert not staged.is_symlink() and staged.read_bytes() == data
    assert (victim / "weights.bin").read_bytes() == HOST_SECRET
    assert (victim / "weights.bin").stat().st_mode & 0o777 != 0o444


def test_outputs_skip_links_and_an_outputs_folder_that_is_a_link(tmp_path, victim):
    work = tmp_path / "job"
    (work / "outputs").mkdir(parents=True)
    (work / "outputs" / "model.bin").write_bytes(b"model")
    (work / "outputs" / "stolen.bin").symlink_to(victim / "weights.bin")
    (work / "outputs" / "dir").symlink_to(victim)
    server, logs = Recorder(), []

    assert upload_outputs(server, 0, str(work), str(work / "outputs"), logs.append) == ""
    assert list(server.uploaded) == ["artifacts/model.bin"]
    assert any("stolen.bin: not a regular file" in line for line in logs)

    other = tmp_path / "job2"
    other.mkdir()
    (other / "outputs").symlink_to(victim)
    note = upload_outputs(server, 0, str(other), str(other / "outputs"), logs.append)
    assert "not uploaded" in note and HOST_SECRET not in server.every_byte()


def test_descriptors_refuse_links_dotdot_and_absolute_paths_on_both_resolvers(tmp_path, monkeypatch):
    import executor.safefs as safefs

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"ok")
    (tmp_path / "a" / "l").symlink_to("/etc")
    (tmp_path / "a" / "p").symlink_to("/etc/passwd")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "q")
    for have_openat2 in (None, False):  # openat2(2), then the component walk older kernels get
        monkeypatch.setattr(safefs, "_have_openat2", have_openat2)
        with Dir.workdir(str(tmp_path)) as work:
            assert work.open_file("a/f").read() == b"ok"
            for bad in ("a/l/passwd", "a/p", "../x", "/etc/passwd", "a/l"):
                with pytest.raises(UnsafePath):
                    work.open_file(bad)
            with pytest.raises(UnsafePath):
                work.sub("a/l/new", create=True)
            with pytest.raises(UnsafePath, match="not a regular file"):
                work.open_file("fifo/q")  # refused, without blocking on the FIFO
    assert sorted(os.listdir("/etc")) and not (Path("/etc") / "new").exists()
