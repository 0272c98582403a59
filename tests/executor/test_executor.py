"""End-to-end tests of the executor: real child processes, real HTTP."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .fakeserver import FakeGantry

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def server() -> Iterator[FakeGantry]:
    fake = FakeGantry().start()
    yield fake
    fake.stop()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env = {k: v for k, v in env.items() if not k.startswith("GANTRY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def start_executor(
    server: FakeGantry,
    workdir: Path,
    *,
    flush: float = 20,
    worker: int = 0,
    cache: Path | None = None,
) -> subprocess.Popen[str]:
    cmd = [
        PY,
        "-m",
        "executor",
        "--api-url",
        server.url,
        "--job",
        str(server.job),
        "--worker",
        str(worker),
        "--workdir",
        str(workdir),
        "--final-flush-seconds",
        str(flush),
    ]
    env = child_env(
        {
            "GANTRY_JOB_TOKEN": server.token,
            "GANTRY_CACHE_DIR": str(cache or workdir.parent / "cache"),
        }
    )
    return subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"executor did not exit; stderr:\n{err}") from None
    return proc.returncode, err


def run_job(server: FakeGantry, workdir: Path, **kw: Any) -> tuple[int, str]:
    return finish(start_executor(server, workdir, **kw))


def script(workdir: Path, source: str, name: str = "job.py") -> list[str]:
    (workdir / name).write_text(textwrap.dedent(source))
    return [PY, name]


def assert_contiguous(server: FakeGantry, worker: int = 0) -> list[dict[str, Any]]:
    lines = server.ordered_lines(worker)
    seqs = [ln["seq"] for ln in lines]
    assert seqs == list(range(1, len(seqs) + 1)), "seq numbers must be 1..N without gaps"
    arrival = server.line_arrival[worker]
    assert arrival == sorted(arrival), "lines must be delivered in seq order"
    return lines


def texts(lines: list[dict[str, Any]], stream: str) -> list[str]:
    return [ln["text"] for ln in lines if ln["stream"] == stream]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


# --------------------------------------------------------------------------------


def test_success_lines_in_order(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import os
        for i in range(300):
            print(f"line {i}")
        print("rank", os.environ["GANTRY_WORKER_RANK"], "job", os.environ["GANTRY_JOB_ID"])
        print("token" , "GANTRY_JOB_TOKEN" in os.environ, os.environ["MY_VAR"])
        print("unicode \\u00e9\\u4e2d", flush=True)
        """,
    )
    server.spec["env"] = {"MY_VAR": "from-spec"}
    code, err = run_job(server, tmp_path)
    assert code == 0, err
    lines = assert_contiguous(server)
    out = texts(lines, "stdout")
    assert out[:300] == [f"line {i}" for i in range(300)]
    assert out[300:] == ["rank 0 job 12", "token False from-spec", "unicode \u00e9\u4e2d"]
    assert any(ln["stream"] == "system" for ln in lines)
    assert all(isinstance(ln["ts"], float) for ln in lines)
    started = server.status_events("started")
    assert started and isinstance(started[0]["pid"], int) and started[0]["worker"] == 0
    final = server.final_status()
    assert final == {
        "worker": 0,
        "event": "exited",
        "exit_code": 0,
        "reason": "exited with code 0",
        "outcome": "succeeded",
    }
    # exited is reported after all lines were delivered
    assert server.statuses[-1]["event"] == "exited"
    assert server.duplicates == 0


def test_stdout_stderr_interleaving_and_long_lines(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import sys
        for i in range(50):
            print(f"out {i}", flush=True)
            print(f"err {i}", file=sys.stderr, flush=True)
        sys.stdout.write("x" * 40000 + "\\n")
        sys.stdout.buffer.write(b"bad \\xff bytes\\n")
        sys.stdout.write("no newline at end")
        """,
    )
    code, err = run_job(server, tmp_path)
    assert code == 0, err
    lines = assert_contiguous(server)
    assert texts(lines, "stderr") == [f"err {i}" for i in range(50)]
    out = texts(lines, "stdout")
    assert out[:50] == [f"out {i}" for i in range(50)]
    long_parts = out[50:53]
    assert "".join(long_parts) == "x" * 40000
    assert all(len(p.encode()) <= 16 * 1024 for p in long_parts)
    assert out[53] == "bad \ufffd bytes"
    assert out[54] == "no newline at end"


def test_failing_exit_code(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = [PY, "-c", "import sys; print('boom'); sys.exit(3)"]
    code, err = run_job(server, tmp_path)
    assert code == 3, err
    final = server.final_status()
    assert final is not None
    assert final["outcome"] == "failed"
    assert final["exit_code"] == 3
    assert final["reason"] == "exited with code 3"
    assert "boom" in texts(server.ordered_lines(), "stdout")


def test_killed_by_signal_reason(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    code, err = run_job(server, tmp_path)
    assert code == 128 + 9, err
    final = server.final_status()
    assert final is not None and final["outcome"] == "failed"
    assert "killed by signal SIGKILL (9)" in final["reason"]
    assert "out of memory" in final["reason"]


def test_command_not_found(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = ["/nonexistent/binary-xyz"]
    code, err = run_job(server, tmp_path)
    assert code == 127, err
    final = server.final_status()
    assert final is not None and final["outcome"] == "failed"
    assert final["reason"] == "command not found: /nonexistent/binary-xyz"


def test_metrics_from_child(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        from executor import log_metric, preemption_requested
        assert not preemption_requested()
        for step in range(5):
            log_metric("loss", 1.0 / (step + 1), step=step)
        log_metric("loss", float("nan"), step=5)
        log_metric("acc", 0.9)
        with open("not-json", "w"):
            pass
        """,
    )
    code, err = run_job(server, tmp_path)
    assert code == 0, err
    metrics = server.ordered_metrics()
    assert [m["seq"] for m in metrics] == list(range(1, 8))
    assert [(m["name"], m["step"]) for m in metrics] == [("loss", s) for s in range(6)] + [
        ("acc", None)
    ]
    assert metrics[0]["value"] == 1.0 and metrics[4]["value"] == 0.2
    assert metrics[5]["value"] is None
    assert all(isinstance(m["ts"], float) for m in metrics)
    assert server.final_status()["outcome"] == "succeeded"  # type: ignore[index]


def test_timeout(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = [PY, "-c", "import time; print('start', flush=True); time.sleep(60)"]
    server.spec["timeout_seconds"] = 1
    t0 = time.monotonic()
    code, err = run_job(server, tmp_path)
    assert time.monotonic() - t0 < 10
    assert code == 128 + signal.SIGTERM, err
    final = server.final_status()
    assert final is not None and final["outcome"] == "timed_out"
    assert final["reason"].startswith("timed out after 1 s")
    system = texts(server.ordered_lines(), "system")
    assert any("sending SIGTERM" in t for t in system)


def test_sigterm_to_executor_kills_process_group(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import os, subprocess, time
        from executor import preemption_requested
        p = subprocess.Popen(["sleep", "300"])
        with open("grandchild.pid", "w") as fh:
            fh.write(str(p.pid))
        print("ready", flush=True)
        try:
            while True:
                time.sleep(0.05)
        finally:
            pass
        """,
    )
    proc = start_executor(server, tmp_path)
    pid_file = tmp_path / "grandchild.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="grandchild pid")
    grandchild = int(pid_file.read_text())
    assert pid_alive(grandchild)
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 128 + signal.SIGTERM, err
    wait_for(lambda: not pid_alive(grandchild), timeout=5, what="grandchild to die")
    final = server.final_status()
    assert final is not None and final["outcome"] == "cancelled"
    assert "SIGTERM" in final["reason"]
    assert (tmp_path / ".gantry" / "preempt").exists()


def test_heartbeat_cancel(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import signal, sys, time
        from executor import preemption_requested
        def on_term(*_):
            print("preempt file seen:", preemption_requested(), flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("ready", flush=True)
        time.sleep(60)
        """,
    )
    proc = start_executor(server, tmp_path)
    wait_for(lambda: "ready" in texts(server.ordered_lines(), "stdout"), what="child ready")
    server.cancel = True
    code, err = finish(proc)
    assert code == 0, err  # the child handled SIGTERM and exited 0
    final = server.final_status()
    assert final is not None and final["outcome"] == "cancelled"
    assert "cancelled by request from the server" in final["reason"]
    assert "preempt file seen: True" in texts(server.ordered_lines(), "stdout")


def test_sigterm_ignored_gets_sigkill_after_grace(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
        """,
    )
    server.spec["timeout_seconds"] = 0.5
    server.spec["grace_seconds"] = 1
    t0 = time.monotonic()
    code, err = run_job(server, tmp_path)
    elapsed = time.monotonic() - t0
    assert code == 128 + signal.SIGKILL, err
    assert elapsed < 10
    final = server.final_status()
    assert final is not None and final["outcome"] == "timed_out"
    assert "SIGKILL" in final["reason"]


def test_revoked_token_stops_job(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = [PY, "-c", "import time; print('ready', flush=True); time.sleep(60)"]
    proc = start_executor(server, tmp_path)
    wait_for(lambda: "ready" in texts(server.ordered_lines(), "stdout"), what="child ready")
    server.revoked = True
    t0 = time.monotonic()
    code, err = finish(proc)
    assert code == 77, err
    assert time.monotonic() - t0 < 10


def test_outage_in_the_middle_loses_nothing(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import os, time
        for i in range(1000):
            print(f"line {i}")
        print("waiting", flush=True)
        while not os.path.exists("go"):
            time.sleep(0.01)
        for i in range(1000, 2000):
            print(f"line {i}")
            if i % 100 == 0:
                time.sleep(0.05)
        """,
    )
    proc = start_executor(server, tmp_path)
    wait_for(lambda: "waiting" in texts(server.ordered_lines(), "stdout"), what="first half")
    server.unavailable = True
    (tmp_path / "go").touch()
    time.sleep(0.8)
    server.stop()
    time.sleep(1.5)
    server.unavailable = False
    server.restart()
    code, err = finish(proc)
    assert code == 0, err
    lines = assert_contiguous(server)
    out = [t for t in texts(lines, "stdout") if t != "waiting"]
    assert out == [f"line {i}" for i in range(2000)]
    assert server.final_status()["outcome"] == "succeeded"  # type: ignore[index]


def test_sigkilled_executor_resends_spool_after_restart(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import os, time
        if os.path.exists("phase1.done"):
            for i in range(50):
                print(f"C{i}")
            raise SystemExit(0)
        with open("child.pid", "w") as fh:
            fh.write(str(os.getpid()))
        for i in range(100):
            print(f"A{i}")
        print("A-done", flush=True)
        while not os.path.exists("go"):
            time.sleep(0.01)
        for i in range(200):
            print(f"B{i}")
        print("B-done", flush=True)
        open("phase1.done", "w").close()
        time.sleep(60)
        """,
    )
    proc = start_executor(server, tmp_path)
    wait_for(lambda: "A-done" in texts(server.ordered_lines(), "stdout"), what="phase A")
    server.stop()
    (tmp_path / "go").touch()
    spool = tmp_path / ".gantry" / "spool" / "logs-w0.jsonl"
    wait_for(lambda: spool.exists() and "B-done" in spool.read_text(), what="B spooled")
    proc.kill()
    proc.communicate()
    child = int((tmp_path / "child.pid").read_text())
    os.killpg(child, signal.SIGKILL)  # the orphaned child of the killed executor
    server.restart()
    code, err = run_job(server, tmp_path)
    assert code == 0, err
    lines = assert_contiguous(server)
    out = texts(lines, "stdout")
    expected = [f"A{i}" for i in range(100)] + ["A-done"]
    expected += [f"B{i}" for i in range(200)] + ["B-done"] + [f"C{i}" for i in range(50)]
    assert out == expected
    assert server.final_status()["outcome"] == "succeeded"  # type: ignore[index]


def test_outputs_uploaded_with_sha256(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["command"] = script(
        tmp_path,
        """
        import os
        out = os.environ["GANTRY_OUTPUTS_DIR"]
        os.makedirs(os.path.join(out, "sub dir", "deep"), exist_ok=True)
        with open(os.path.join(out, "model.bin"), "wb") as fh:
            fh.write(bytes(range(256)) * 1000)
        with open(os.path.join(out, "sub dir", "deep", "notes.txt"), "w") as fh:
            fh.write("hello")
        open(os.path.join(out, "empty"), "w").close()
        """,
    )
    code, err = run_job(server, tmp_path)
    assert code == 0, err
    assert set(server.artifacts) == {(0, "model.bin"), (0, "sub dir/deep/notes.txt"), (0, "empty")}
    model = server.artifacts[(0, "model.bin")]
    assert model["data"] == bytes(range(256)) * 1000
    for art in server.artifacts.values():
        assert art["sha256"] == art["actual_sha256"]
        assert art["content_type"] == "application/octet-stream"
    # statuses: exited comes after the uploads
    puts = [i for i, (m, _) in enumerate(server.requests) if m == "PUT"]
    exited = max(
        i for i, (m, p) in enumerate(server.requests) if m == "POST" and p.endswith("/status")
    )
    assert max(puts) < exited


def test_input_staging(server: FakeGantry, tmp_path: Path) -> None:
    data = b"a,b\n1,2\n"
    url = server.add_file("train.csv", data)
    server.spec["inputs"] = [
        {
            "mount": "data/train",
            "files": [
                {
                    "path": "a/b.csv",
                    "url": url,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                }
            ],
        }
    ]
    server.spec["command"] = [PY, "-c", "print(open('data/train/a/b.csv').read().split()[1])"]
    code, err = run_job(server, tmp_path)
    assert code == 0, err
    assert "1,2" in texts(server.ordered_lines(), "stdout")


def test_input_bad_sha256_fails_cleanly(server: FakeGantry, tmp_path: Path) -> None:
    url = server.add_file("train.csv", b"a,b\n1,2\n")
    server.spec["inputs"] = [
        {
            "mount": "data",
            "files": [
                {"path": "train.csv", "url": server.url + url, "sha256": "0" * 64, "size": 8}
            ],
        }
    ]
    server.spec["command"] = [PY, "-c", "open('ran', 'w').close()"]
    code, err = run_job(server, tmp_path)
    assert code == 65, err
    final = server.final_status()
    assert final is not None and final["outcome"] == "failed"
    assert "input staging failed" in final["reason"]
    assert "sha256 mismatch" in final["reason"]
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "data" / "train.csv").exists()
    assert any("sha256 mismatch" in t for t in texts(server.ordered_lines(), "system"))
    assert not server.status_events("started")


@pytest.mark.parametrize(
    ("mount", "path"),
    [("data", "../../escape.txt"), ("..", "escape.txt"), ("data", "/etc/escape.txt")],
)
def test_input_path_traversal_refused(
    server: FakeGantry, tmp_path: Path, mount: str, path: str
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    url = server.add_file("x", b"evil")
    server.spec["inputs"] = [
        {
            "mount": mount,
            "files": [
                {"path": path, "url": url, "sha256": hashlib.sha256(b"evil").hexdigest(), "size": 4}
            ],
        }
    ]
    code, err = run_job(server, workdir)
    assert code == 65, err
    final = server.final_status()
    assert final is not None and final["outcome"] == "failed"
    assert "refusing" in final["reason"]
    assert not (tmp_path / "escape.txt").exists()
    assert not any(p == "/files/x" for _, p in server.requests)


def test_missing_arguments_is_usage_error() -> None:
    proc = subprocess.run(
        [PY, "-m", "executor"], cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True
    )
    assert proc.returncode == 64
    assert "missing" in proc.stderr


def test_metrics_file_protocol(tmp_path: Path) -> None:
    metrics_file = tmp_path / "m.jsonl"
    code = (
        "from executor import log_metric\n"
        "log_metric('loss', 0.5, step=1)\n"
        "log_metric('loss', float('inf'))\n"
        "try:\n"
        "    log_metric('', 1.0)\n"
        "except ValueError:\n"
        "    print('rejected')\n"
    )
    out = subprocess.run(
        [PY, "-c", code],
        env=child_env({"GANTRY_METRICS_FILE": str(metrics_file)}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "rejected"
    recs = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [(r["name"], r["value"], r["step"]) for r in recs] == [
        ("loss", 0.5, 1),
        ("loss", None, None),
    ]
    out = subprocess.run(
        [PY, "-c", "from executor import log_metric; log_metric('acc', 0.75, step=3)"],
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stderr.strip() == "[metric] acc=0.75 step=3"


def test_missing_input_file_is_a_staging_failure(server: FakeGantry, tmp_path: Path) -> None:
    server.spec["inputs"] = [
        {
            "mount": "d",
            "files": [{"path": "x", "url": "/files/nope", "sha256": "0" * 64, "size": 1}],
        }
    ]
    code, err = run_job(server, tmp_path)
    assert code == 65, err
    final = server.final_status()
    assert final is not None and final["outcome"] == "failed"
    assert "HTTP 404" in final["reason"]


def test_destination_refuses_paths_out_of_the_workdir() -> None:
    from executor.staging import StagingError, destination

    assert destination("data/train", "a/b.csv") == ["data", "train", "a", "b.csv"]
    assert destination("", "./x") == ["x"]
    for mount, path in [
        ("data", "../../x"),
        ("a/../..", "x"),
        ("/abs", "x"),
        ("data", "/etc/passwd"),
        ("data", ""),
        (".gantry", "spool/x"),
        ("data", "a\\..\\..\\x"),
    ]:
        with pytest.raises(StagingError):
            destination(mount, path)


# --- per-machine input cache and read-only staging ------------------------------------


def _dataset_input(server: FakeGantry, files: dict[str, bytes], *, read_only: bool) -> None:
    entries = []
    for name, data in files.items():
        url = server.add_file(name, data)
        entries.append(
            {
                "path": name,
                "url": url,
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
        )
    server.spec["inputs"] = [{"mount": "data/ds", "files": entries, "read_only": read_only}]


def _downloads(server: FakeGantry) -> list[str]:
    with server.lock:
        return [p for m, p in server.requests if m == "GET" and p.startswith("/files/")]


def test_second_job_on_same_version_downloads_nothing(server: FakeGantry, tmp_path: Path) -> None:
    files = {"a.bin": os.urandom(3000), "b.txt": b"hello\n"}
    _dataset_input(server, files, read_only=True)
    server.spec["command"] = [PY, "-c", "print(open('data/ds/b.txt').read().strip())"]
    cache = tmp_path / "cache"
    (tmp_path / "w1").mkdir()
    (tmp_path / "w2").mkdir()
    code, err = run_job(server, tmp_path / "w1", cache=cache)
    assert code == 0, err
    assert sorted(_downloads(server)) == ["/files/a.bin", "/files/b.txt"]
    for data in files.values():
        sha = hashlib.sha256(data).hexdigest()
        blob = cache / sha[:2] / sha
        assert blob.read_bytes() == data
        assert (blob.stat().st_mode & 0o777) == 0o444
    code, err = run_job(server, tmp_path / "w2", cache=cache)
    assert code == 0, err
    assert len(_downloads(server)) == 2, "the second job must be served by the cache"
    staged = tmp_path / "w2" / "data" / "ds" / "a.bin"
    assert staged.read_bytes() == files["a.bin"]
    sha = hashlib.sha256(files["a.bin"]).hexdigest()
    assert staged.stat().st_ino == (cache / sha[:2] / sha).stat().st_ino  # hard link
    assert any("2 from the cache" in t for t in texts(server.ordered_lines(), "system"))
    assert not list(cache.rglob("*.part"))


def test_concurrent_executors_share_one_download(server: FakeGantry, tmp_path: Path) -> None:
    data = os.urandom(1 << 20)
    _dataset_input(server, {"big.bin": data}, read_only=True)
    server.spec["command"] = [PY, "-c", "pass"]
    cache = tmp_path / "cache"
    procs = []
    for i in range(2):
        (tmp_path / f"w{i}").mkdir()
        procs.append(start_executor(server, tmp_path / f"w{i}", cache=cache, worker=i))
    for proc in procs:
        code, err = finish(proc)
        assert code == 0, err
    assert _downloads(server) == ["/files/big.bin"]
    for i in range(2):
        assert (tmp_path / f"w{i}" / "data" / "ds" / "big.bin").read_bytes() == data


def test_read_only_inputs_are_0444_and_writable_ones_are_private_copies(
    server: FakeGantry, tmp_path: Path
) -> None:
    data = b"x,y\n"
    cache = tmp_path / "cache"
    _dataset_input(server, {"ro.csv": data}, read_only=True)
    server.spec["command"] = [PY, "-c", "pass"]
    (tmp_path / "w1").mkdir()
    code, err = run_job(server, tmp_path / "w1", cache=cache)
    assert code == 0, err
    ro = tmp_path / "w1" / "data" / "ds" / "ro.csv"
    assert (ro.stat().st_mode & 0o777) == 0o444

    _dataset_input(server, {"rw.csv": data}, read_only=False)
    (tmp_path / "w2").mkdir()
    code, err = run_job(server, tmp_path / "w2", cache=cache)
    assert code == 0, err
    rw = tmp_path / "w2" / "data" / "ds" / "rw.csv"
    assert rw.stat().st_mode & 0o200, "writable inputs stay writable"
    sha = hashlib.sha256(data).hexdigest()
    assert rw.stat().st_ino != (cache / sha[:2] / sha).stat().st_ino
    rw.write_bytes(b"changed")
    assert (cache / sha[:2] / sha).read_bytes() == data


def test_read_only_must_be_boolean(server: FakeGantry, tmp_path: Path) -> None:
    _dataset_input(server, {"a": b"a"}, read_only=True)
    server.spec["inputs"][0]["read_only"] = "yes"
    code, err = run_job(server, tmp_path)
    assert code == 65, err
    assert "read_only" in server.final_status()["reason"]


def test_cache_evicts_least_recently_used(tmp_path: Path) -> None:
    from executor.safefs import Dir
    from executor.staging import BlobCache

    cache = BlobCache(str(tmp_path / "c"), max_bytes=250)
    shas = []
    for i in range(3):
        data = bytes([i]) * 100
        sha = hashlib.sha256(data).hexdigest()
        shas.append(sha)

        def fetch(out, data: bytes = data) -> None:
            out.write(data)

        with Dir.workdir(str(tmp_path)) as folder:
            assert not cache.stage(sha, 100, folder, f"d{i}", link=True, fetch=fetch, cancelled=lambda: False)
        blob = Path(cache.path(sha))
        os.utime(blob, (1000 + i, blob.stat().st_mtime))  # deterministic use order
    os.utime(cache.path(shas[0]), (5000, os.stat(cache.path(shas[0])).st_mtime))  # used again
    cache.evict()
    assert os.path.exists(cache.path(shas[0]))
    assert not os.path.exists(cache.path(shas[1]))
    assert os.path.exists(cache.path(shas[2]))
    assert (tmp_path / "d1").read_bytes() == bytes([1]) * 100  # the staged link survives


def test_unusable_cache_falls_back_to_downloading(server: FakeGantry, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("")
    _dataset_input(server, {"a.txt": b"abc"}, read_only=True)
    server.spec["command"] = [PY, "-c", "print(open('data/ds/a.txt').read())"]
    (tmp_path / "w").mkdir()
    code, err = run_job(server, tmp_path / "w", cache=not_a_dir)
    assert code == 0, err
    assert "abc" in texts(server.ordered_lines(), "stdout")
    assert any("input cache disabled" in t for t in texts(server.ordered_lines(), "system"))
    assert ((tmp_path / "w" / "data" / "ds" / "a.txt").stat().st_mode & 0o777) == 0o444
