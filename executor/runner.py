"""Run one job worker: fetch spec, stage inputs, run the child, stream
logs/metrics, heartbeat, enforce cancel/timeout, upload outputs, report."""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import math
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import IO, Any

from . import mlflow_relay, sandbox
from .client import Client, FatalError, GiveUp, HttpError, log_stderr
from .shipper import Shipper
from .staging import StagingCancelled, StagingError, stage_inputs

MAX_LINE_BYTES = 16 * 1024
POLL = 0.05

# Documented exit codes for failures of the executor itself.
EXIT_STAGING_FAILED = 65  # input staging failed (bad checksum, path, download)
EXIT_SERVER_UNAVAILABLE = 69  # could not fetch the job spec in time
EXIT_INTERNAL = 70  # internal error / invalid spec / outputs not uploaded
EXIT_REVOKED = 77  # 401/403/404: job gone or token revoked
EXIT_CANNOT_START = 127  # command not found / not executable
EXIT_CANCELLED_BEFORE_START = 128 + signal.SIGTERM


@dataclass
class Config:
    api_url: str
    token: str
    job_id: str
    worker: int
    workdir: str
    final_flush_seconds: float = 300.0
    # The bubblewrap spec (executor.sandbox.parse_spec); None runs the command as is.
    sandbox: dict[str, Any] | None = None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def describe_returncode(rc: int) -> str:
    if rc >= 0:
        return f"exited with code {rc}"
    sig = -rc
    text = f"killed by signal {_signal_name(sig)} ({sig})"
    if sig == signal.SIGKILL:
        text += " - possibly out of memory (OOM killer)"
    return text


def exit_code_for(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


class Runner:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.client = Client(cfg.api_url, cfg.token, cfg.job_id)
        self.workdir = os.path.abspath(cfg.workdir)
        self.state_dir = os.path.join(self.workdir, ".gantry")
        self.logs: Shipper | None = None
        self.metrics: Shipper | None = None
        self.spec: dict[str, Any] = {}
        # Stop request (plain attributes: also written from a signal handler).
        self._signal: int | None = None
        self._hb_cancel = False
        self._stop_outcome: str | None = None
        self._stop_reason: str | None = None
        self._finished = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.preempt_file = os.path.join(self.state_dir, "preempt")
        self.metrics_file = os.path.join(self.state_dir, f"metrics-w{cfg.worker}.jsonl")
        self.relay: mlflow_relay.Relay | None = None

    # -- diagnostics -------------------------------------------------------------
    def log(self, msg: str) -> None:
        """Executor message: stderr and the job log (stream "system")."""
        log_stderr(msg)
        if self.logs is not None:
            self.logs.add({"stream": "system", "ts": time.time(), "text": f"[gantry] {msg}"})

    # -- signals -----------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        if self._signal is None:
            self._signal = signum

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _interrupted(self) -> bool:
        return self._signal is not None or self._hb_cancel or self.client.fatal is not None

    def _check_stop(self) -> None:
        if self._stop_outcome is not None:
            return
        if self.client.fatal is not None:
            self._stop_outcome = "cancelled"
            self._stop_reason = (
                f"cancelled: the server answered HTTP {self.client.fatal.status} "
                "(job gone or token revoked)"
            )
        elif self._signal is not None:
            self._stop_outcome = "cancelled"
            self._stop_reason = f"cancelled: executor received {_signal_name(self._signal)}"
        elif self._hb_cancel:
            self._stop_outcome = "cancelled"
            self._stop_reason = "cancelled by request from the server"

    # -- main --------------------------------------------------------------------
    def run(self) -> int:
        os.makedirs(self.state_dir, exist_ok=True)
        spool_dir = os.path.join(self.state_dir, "spool")
        worker = self.cfg.worker
        self.logs = Shipper(
            self.client, endpoint="logs", key="lines", worker=worker, spool_dir=spool_dir
        )
        self.metrics = Shipper(
            self.client, endpoint="metrics", key="metrics", worker=worker, spool_dir=spool_dir
        )
        startup_deadline = time.monotonic() + self.cfg.final_flush_seconds
        try:
            log_stderr(
                f"job {self.cfg.job_id} worker {worker}: fetching spec from {self.client.base}"
            )
            spec = self.client.json(
                "GET", "spec", retry=True, interrupted=self._interrupted, deadline=startup_deadline
            )
            if not isinstance(spec, dict):
                raise HttpError(200, self.client.url("spec"), "spec is not a JSON object")
            self.spec = spec
            for shipper in (self.logs, self.metrics):
                if shipper.load():
                    log_stderr(f"re-sending {shipper.resent} spooled {shipper.endpoint} item(s)")
                shipper.probe_server(startup_deadline)
        except FatalError as exc:
            log_stderr(f"job not available: {exc}")
            return EXIT_REVOKED
        except GiveUp as exc:
            if self._signal is not None:
                return 128 + self._signal
            log_stderr(f"cannot reach the Gantry API: {exc}")
            return EXIT_SERVER_UNAVAILABLE
        except HttpError as exc:
            log_stderr(f"cannot fetch job spec: {exc}")
            return EXIT_INTERNAL
        self.logs.start()
        self.metrics.start()
        hb = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        hb.start()
        try:
            outcome, reason, code = self._run_job()
        except Exception as exc:
            import traceback

            traceback.print_exc()
            outcome, reason, code = "failed", f"internal executor error: {exc!r}", EXIT_INTERNAL
        return self._finish(outcome, reason, code)

    def _run_job(self) -> tuple[str, str, int]:
        spec = self.spec
        command = spec.get("command")
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            return "failed", f"invalid command in job spec: {command!r}", EXIT_INTERNAL
        outputs_dir = self._outputs_dir()
        if outputs_dir is None:
            return (
                "failed",
                f"invalid outputs_dir in job spec: {spec.get('outputs_dir')!r}",
                EXIT_INTERNAL,
            )
        os.makedirs(outputs_dir, exist_ok=True)

        try:
            stage_inputs(
                self.client,
                self.workdir,
                spec.get("inputs") or [],
                self.log,
                self._interrupted,
                time.monotonic() + self.cfg.final_flush_seconds,
            )
        except StagingError as exc:
            if self.client.fatal is None:
                self.log(f"input staging failed: {exc}")
                return "failed", f"input staging failed: {exc}", EXIT_STAGING_FAILED
        except StagingCancelled:
            pass
        self._check_stop()
        if self._stop_outcome is not None:
            code = EXIT_REVOKED if self.client.fatal is not None else EXIT_CANCELLED_BEFORE_START
            if self._signal is not None:
                code = 128 + self._signal
            return self._stop_outcome, f"{self._stop_reason} (before the command started)", code

        env = dict(os.environ)
        env.pop("GANTRY_JOB_TOKEN", None)
        env.pop(sandbox.SPEC_ENV, None)
        for k, v in (spec.get("env") or {}).items():
            env[str(k)] = str(v)
        env.update(
            {
                "GANTRY_JOB_ID": str(self.cfg.job_id),
                "GANTRY_WORKER_RANK": str(self.cfg.worker),
                "GANTRY_OUTPUTS_DIR": outputs_dir,
                "GANTRY_METRICS_FILE": self.metrics_file,
                "GANTRY_PREEMPT_FILE": self.preempt_file,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self._mlflow_env())
        for stale in (self.preempt_file, self.metrics_file):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        open(self.metrics_file, "ab").close()
        argv = command
        box = self.cfg.sandbox
        if box is not None:
            try:
                argv = self._sandboxed(command, box)
            except OSError as exc:
                self.log(f"cannot prepare the sandbox: {exc}")
                return "failed", f"cannot prepare the sandbox: {exc}", EXIT_INTERNAL
            env = sandbox.sandbox_env(env, spec.get("env") or {}, self.workdir)

        try:
            proc = subprocess.Popen(
                argv,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.log(f"cannot start command {command[0]!r}: {exc}")
            return (
                "failed",
                f"cannot start command {command[0]!r}: {exc.strerror or exc}",
                EXIT_CANNOT_START,
            )
        self.proc = proc
        started = time.monotonic()
        readers = [
            threading.Thread(target=self._read_stream, args=(proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._read_stream, args=(proc.stderr, "stderr"), daemon=True),
        ]
        for t in readers:
            t.start()
        tail_stop = threading.Event()
        tailer = threading.Thread(target=self._tail_metrics, args=(tail_stop,), daemon=True)
        tailer.start()
        started_status = threading.Thread(
            target=self._post_status,
            args=({"worker": self.cfg.worker, "event": "started", "pid": proc.pid},),
            daemon=True,
        )
        started_status.start()
        self.log(f"started command (pid {proc.pid}): {shlex.join(command)}")

        timeout = spec.get("timeout_seconds")
        timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
        grace = spec.get("grace_seconds")
        grace = float(grace) if isinstance(grace, (int, float)) and grace >= 0 else 10.0
        term_at: float | None = None
        killed = False
        while True:
            rc = proc.poll()
            if rc is not None:
                break
            self._check_stop()
            now = time.monotonic()
            if self._stop_outcome is None and timeout is not None and now - started >= timeout:
                self._stop_outcome = "timed_out"
                self._stop_reason = f"timed out after {_fmt_seconds(timeout)} s"
            if self._stop_outcome is not None and term_at is None:
                with contextlib.suppress(OSError):
                    open(self.preempt_file, "w").close()
                self.log(
                    f"{self._stop_reason}; sending SIGTERM to the process group (grace {_fmt_seconds(grace)} s)"
                )
                self._killpg(signal.SIGTERM)
                term_at = now
            elif term_at is not None and not killed and now - term_at >= grace:
                self.log(
                    f"process still running {_fmt_seconds(grace)} s after SIGTERM; sending SIGKILL"
                )
                self._killpg(signal.SIGKILL)
                killed = True
            time.sleep(POLL)

        # Child exited. Grandchildren may still hold the pipes open: give the
        # readers a moment, then kill whatever is left of the process group.
        for t in readers:
            t.join(1.0)
        self._killpg(signal.SIGKILL)
        for t in readers:
            t.join(5.0)
        tail_stop.set()
        tailer.join(5.0)
        if self.relay is not None:
            self.relay.stop()
        # From now on retries are bounded by --final-flush-seconds.
        self.client.deadline = time.monotonic() + self.cfg.final_flush_seconds
        started_status.join(max(0.0, self.client.deadline - time.monotonic()) + 1)

        code = exit_code_for(rc)
        desc = describe_returncode(rc)
        if self._stop_outcome is not None:
            outcome = self._stop_outcome
            reason = self._stop_reason or outcome
            if killed:
                reason += f"; killed with SIGKILL after {_fmt_seconds(grace)} s grace"
            else:
                reason += f"; process {desc}"
        elif rc == 0:
            outcome, reason = "succeeded", desc
        else:
            outcome, reason = "failed", desc
        self.log(f"command {desc}")

        if self.client.fatal is None:
            failed_uploads = self._upload_outputs(outputs_dir)
            if failed_uploads and outcome == "succeeded":
                outcome = "failed"
                reason = f"{reason}, but {failed_uploads}"
                code = EXIT_INTERNAL
            elif failed_uploads:
                reason = f"{reason}; {failed_uploads}"
        if self.client.fatal is not None:
            code = EXIT_REVOKED
        return outcome, reason, code

    def _finish(self, outcome: str, reason: str, code: int) -> int:
        assert self.logs is not None and self.metrics is not None
        self.log(f"job finished: {outcome} ({reason})")
        if self.client.deadline is None:
            self.client.deadline = time.monotonic() + self.cfg.final_flush_seconds
        deadline = self.client.deadline
        self.metrics.close()
        self.logs.close()
        if self.client.fatal is None:
            self.metrics.wait(max(0.0, deadline - time.monotonic()) + 1)
            self.logs.wait(max(0.0, deadline - time.monotonic()) + 1)
        undelivered = self.logs.undelivered + self.metrics.undelivered
        if undelivered:
            log_stderr(
                f"{undelivered} log/metric item(s) could not be delivered; "
                f"they remain spooled in {os.path.join(self.state_dir, 'spool')}"
            )
        if self.client.fatal is None:
            status = {
                "worker": self.cfg.worker,
                "event": "exited",
                "exit_code": code,
                "reason": reason,
                "outcome": outcome,
            }
            try:
                self.client.json("POST", "status", status)
            except (HttpError, GiveUp) as exc:
                log_stderr(f"could not report final status: {exc}")
        if self.client.fatal is not None:
            log_stderr(f"stopped: {self.client.fatal}")
            code = EXIT_REVOKED
        self._finished.set()
        log_stderr(f"exiting with code {code} ({outcome}: {reason})")
        return code

    # -- helpers -------------------------------------------------------------------
    def _outputs_dir(self) -> str | None:
        rel = self.spec.get("outputs_dir") or "outputs"
        if not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/"):
            return None
        path = os.path.normpath(os.path.join(self.workdir, rel))
        if os.path.commonpath([self.workdir, path]) != self.workdir or path == self.workdir:
            return None
        return path

    def _sandboxed(self, command: list[str], box: dict[str, Any]) -> list[str]:
        """Give the workdir to the job's user and wrap `command` in bubblewrap."""
        sandbox.prepare_workdir(
            self.workdir, self.state_dir, self.metrics_file, box["uid"], box["gid"], box.get("shm")
        )
        package = os.path.dirname(os.path.realpath(sandbox.__file__))
        self.log(f"sandboxed as uid {box['uid']}: sees its workdir, inputs and runtime only")
        return sandbox.bwrap_argv(
            box,
            command,
            workdir=self.workdir,
            state_dir=self.state_dir,
            metrics_file=self.metrics_file,
            executor_package=package,
        )

    def _killpg(self, sig: int) -> None:
        if self.proc is None:
            return
        if self.cfg.sandbox is not None and sig != signal.SIGKILL:
            # bwrap is the group's leader: SIGTERM would kill it, and with it the whole
            # sandbox at once (SIGKILL), leaving the command no grace to checkpoint. The
            # command and its children get the signal; bwrap does not.
            for pid in sandbox.group_members(self.proc.pid):
                if pid != self.proc.pid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _post_status(self, body: dict[str, Any]) -> None:
        try:
            self.client.json("POST", "status", body)
        except (HttpError, GiveUp) as exc:
            log_stderr(f"could not report status {body.get('event')}: {exc}")

    def _heartbeat_loop(self) -> None:
        try:
            interval = float(self.spec.get("heartbeat_seconds") or 5.0)
        except (TypeError, ValueError):
            interval = 5.0
        interval = max(0.05, interval)
        while not self._finished.wait(interval):
            try:
                resp = self.client.json(
                    "POST", "heartbeat", {"worker": self.cfg.worker}, retry=False
                )
            except FatalError:
                return
            except Exception as exc:
                self.client._warn(f"heartbeat failed: {exc}")
                continue
            if isinstance(resp, dict) and resp.get("cancel") is True:
                self._hb_cancel = True

    def _read_stream(self, pipe: IO[bytes] | None, stream: str) -> None:
        assert pipe is not None and self.logs is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        add = self.logs.add
        try:
            while True:
                raw = pipe.readline(MAX_LINE_BYTES)
                if not raw:
                    tail = decoder.decode(b"", final=True)
                    if tail:
                        add({"stream": stream, "ts": time.time(), "text": tail})
                    break
                complete = raw.endswith(b"\n")
                text = decoder.decode(raw, final=complete)
                if complete:
                    text = text[:-1]
                    if text.endswith("\r"):
                        text = text[:-1]
                add({"stream": stream, "ts": time.time(), "text": text})
        except (OSError, ValueError) as exc:
            log_stderr(f"error reading child {stream}: {exc}")
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def _mlflow_env(self) -> dict[str, str]:
        """MLflow's variables for the command, its tracking URI the relay in the command's
        network (executor/mlflow_relay.py); none when Gantry offers no tracking API."""
        try:
            resp = self.client.open(
                "GET",
                self.client.url("tracking"),
                headers={"Accept": "application/json"},
                fatal=False,
            )
            with resp:
                env = json.loads(resp.read()).get("env") or {}
            box = self.cfg.sandbox or {}
            self.relay = mlflow_relay.Relay(
                env["MLFLOW_TRACKING_URI"],
                env["MLFLOW_TRACKING_TOKEN"],
                env["MLFLOW_RUN_ID"],
                lambda points: [self.metrics.add(p) for p in points],
                netns_fd=box.get("netns_fd"),
            )
        except Exception as exc:  # an older Gantry, or none reachable: the job runs without
            self.log(f"MLflow tracking is not available to this job: {exc}")
            return {}
        env["MLFLOW_TRACKING_URI"] = self.relay.start()
        return {str(k): str(v) for k, v in env.items()}

    def _tail_metrics(self, stop: threading.Event) -> None:
        assert self.metrics is not None
        buf = b""
        pos = 0
        warned = 0
        while True:
            final = stop.is_set()
            try:
                with open(self.metrics_file, "rb") as fh:
                    fh.seek(pos)
                    data = fh.read()
            except OSError:
                data = b""
            if data:
                pos += len(data)
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    item = _parse_metric(line)
                    if item is None:
                        if warned < 10:
                            warned += 1
                            self.log(f"ignoring malformed metric line: {line[:200]!r}")
                        continue
                    self.metrics.add(item)
            if final:
                break
            stop.wait(0.1)

    def _upload_outputs(self, outputs_dir: str) -> str:
        """Upload every file under outputs_dir; returns a failure note or ''."""
        files: list[tuple[str, str]] = []
        root = os.path.realpath(self.workdir)
        for dirpath, dirnames, filenames in os.walk(outputs_dir):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                real = os.path.realpath(path)
                if os.path.commonpath([root, real]) != root or not os.path.isfile(real):
                    self.log(f"skipping output {path}: not a regular file inside the workdir")
                    continue
                rel = os.path.relpath(path, outputs_dir).replace(os.sep, "/")
                files.append((rel, real))
        if not files:
            return ""
        self.log(f"uploading {len(files)} output file(s)")
        failures: list[str] = []
        total = 0
        for rel, real in files:
            try:
                size, digest = _size_and_sha256(real)
                self.client.put_file(
                    "artifacts/" + urllib.parse.quote(rel, safe="/"),
                    real,
                    size,
                    {"X-Gantry-Worker": str(self.cfg.worker), "X-Gantry-Sha256": digest},
                )
                total += size
            except FatalError:
                return "output upload stopped: job gone or token revoked"
            except (HttpError, GiveUp, OSError) as exc:
                failures.append(rel)
                self.log(f"could not upload output {rel}: {exc}")
        if failures:
            return f"{len(failures)} of {len(files)} output file(s) could not be uploaded"
        self.log(f"uploaded {len(files)} output file(s) ({total} bytes)")
        return ""


def _size_and_sha256(path: str) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            n += len(chunk)
            h.update(chunk)
    return n, h.hexdigest()


def _parse_metric(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    name = rec.get("name")
    if not isinstance(name, str) or not name:
        return None
    value = rec.get("value")
    if isinstance(value, bool) or not (value is None or isinstance(value, (int, float))):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    step = rec.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None
    ts = rec.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        ts = time.time()
    return {"step": step, "name": name, "value": value, "ts": ts}


def _fmt_seconds(s: float) -> str:
    return str(int(s)) if float(s).is_integer() else f"{s:g}"
