"""executor/code.py: the job's code staged into its working directory, checked file by file.

Against tests/executor/fakeserver.py (a stand-in for Gantry's agent API, serving the
manifest and the files), with the real executor Client and staging code."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator

import pytest

from executor.client import Client
from executor.code import stage_code
from executor.staging import StagingError
from tests.executor.fakeserver import FakeGantry


@pytest.fixture
def server() -> Iterator[FakeGantry]:
    fake = FakeGantry().start()
    yield fake
    fake.stop()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GANTRY_CACHE_DIR", str(tmp_path / "cache"))


def _manifest(server: FakeGantry, files: dict[str, bytes], executable=(), sha=None) -> str:
    entries = []
    for i, (path, data) in enumerate(files.items()):
        entries.append(
            {
                "path": path,
                "size": len(data),
                "sha256": sha or hashlib.sha256(data).hexdigest(),
                "mode": 0o755 if path in executable else 0o644,
                "url": server.add_file(f"blob{i}", data),
            }
        )
    return server.add_file("manifest", json.dumps({"snapshot": 7, "files": entries}).encode())


def _stage(server: FakeGantry, workdir, url: str) -> list[str]:
    client = Client(server.url, server.token, str(server.job))
    log: list[str] = []
    stage_code(client, str(workdir), url, log.append, lambda: False, None)
    return log


def test_code_is_staged_read_only_with_folders_writable(server, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    files = {"hello.py": b"print('hi')\n", "pkg/util.py": b"X = 1\n", "run.sh": b"#!/bin/sh\necho\n"}
    log = _stage(server, workdir, _manifest(server, files, executable={"run.sh"}))
    for path, data in files.items():
        assert (workdir / path).read_bytes() == data
    assert stat.S_IMODE((workdir / "hello.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((workdir / "run.sh").stat().st_mode) == 0o555
    assert os.access(workdir / "pkg", os.W_OK)
    (workdir / "pkg" / "written-by-the-job.txt").write_text("ok")  # the folder is the job's
    assert any("code snapshot #7: 3 file(s)" in line for line in log)
    assert any("staged 3 code file(s)" in line for line in log)


@pytest.mark.parametrize("path", ["../escape.py", "/etc/escape.py", ".gantry/spec", "a/../../x"])
def test_paths_that_escape_the_workdir_are_refused_before_any_download(server, tmp_path, path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    url = _manifest(server, {path: b"evil"})
    with pytest.raises(StagingError, match="refusing"):
        _stage(server, workdir, url)
    assert not any(p.startswith("/files/blob") for _, p in server.requests)
    assert not (tmp_path / "escape.py").exists()


def test_a_symlink_in_the_workdir_cannot_lead_code_outside(server, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "outside").mkdir()
    (workdir / "lib").symlink_to(tmp_path / "outside")
    with pytest.raises(StagingError, match="symbolic link"):
        _stage(server, workdir, _manifest(server, {"lib/x.py": b"x"}))
    assert not (tmp_path / "outside" / "x.py").exists()


def test_a_file_whose_bytes_do_not_match_is_not_placed(server, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(StagingError, match="sha256 mismatch"):
        _stage(server, workdir, _manifest(server, {"hello.py": b"print(1)\n"}, sha="0" * 64))
    assert not (workdir / "hello.py").exists()


def test_no_code_stages_nothing(server, tmp_path):
    assert _stage(server, tmp_path, None) == []
    assert server.requests == []
