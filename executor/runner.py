"""Run one job worker: fetch spec, stage inputs, run the child, stream
logs/metrics, heartbeat, enforce cancel/timeout, upload outputs, report."""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from . import mlflow_relay, sandbox
from .checkpoints import CheckpointAgent
from .client import Client, FatalError, GiveUp, HttpError, log_stderr
from .code import stage_code
from .gpu import start_sampler
from .limits import JobLimits
from .metrics_file import tail_metrics
from .outputs import upload_outputs
from .safefs import Dir
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


# What setpriv (the sandbox's last step, executor/sandbox.py) prints when the command
# itself cannot be executed; it then exits 127 (not found) or 126.
EXEC_FAILED = "setpriv: failed to execute "


def _exec_reason(failure: str) -> str:
    """A job's reason from setpriv's complaint: "command not found: pyhton" for a typo."""
    name, _, why = failure.rpartition(": ")
    if why == "No such file or directory":
        return f"command not found: {name}"
    return f"cannot run {name}: {why}" if name else f"cannot run the command: {failure}"


def exit_code_for(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


class Ended(Exception):
    """A step of `Runner._run_job` ends the attempt early with this outcome."""

    def __init__(self, outcome: str, reason: str, code: int) -> None:
        super().__init__(reason)
        self.outcome, self.reason, self.code = outcome, reason, code


@dataclass
class _Watchers:
    """The threads that follow a running command (see `Runner._watch`)."""

    readers: list[threading.Thread]
    tailer: threading.Thread
    tail_stop: threading.Event
    started_status: threading.Thread


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
        # "pyhton: No such file or directory" when the sandbox could not exec the command.
        self._exec_failure: str | None = None
        self.job_limits = JobLimits()  # the sandboxed command's cgroup and disk watch
        self.preempt_file = os.path.join(self.state_dir, "preempt")
        self.metrics_file = os.path.join(self.state_dir, f"metrics-w{cfg.worker}.jsonl")
        self.relay: mlflow_relay.Relay | None = None
        self.checkpoints = CheckpointAgent(self.client, self.workdir, cfg.worker, self.log, cfg.sandbox)

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
        """Run the command once, in steps; any step may end the attempt early (`Ended`)."""
        try:
            command, outputs_dir = self._command_and_outputs()
            self._stage_inputs()
            proc = self._start(command, self._command_env(outputs_dir))
        except Ended as ended:
            return ended.outcome, ended.reason, ended.code
        watchers = self._watch(proc, command)
        self.checkpoints.start()
        rc, killed, grace = self._supervise(proc)
        self._drain(watchers)
        self.checkpoints.finish()  # what the command saved last, before the exit report
        outcome, reason, code = self._outcome(rc, killed, grace)
        return self._ship_outputs(outputs_dir, outcome, reason, code)

    def _command_and_outputs(self) -> tuple[list[str], str]:
        """The spec's argv and the outputs folder (created), or Ended for a bad spec."""
        spec = self.spec
        command = spec.get("command")
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            raise Ended("failed", f"invalid command in job spec: {command!r}", EXIT_INTERNAL)
        outputs_dir = self._outputs_dir()
        if outputs_dir is None:
            raise Ended(
                "failed",
                f"invalid outputs_dir in job spec: {spec.get('outputs_dir')!r}",
                EXIT_INTERNAL,
            )
        try:  # through descriptors: a reused workdir may hold the job's links
            with Dir.workdir(self.workdir) as work:
                work.sub(os.path.relpath(outputs_dir, self.workdir), create=True).close()
        except OSError as exc:
            raise Ended("failed", f"cannot create the outputs folder: {exc}", EXIT_INTERNAL) from exc
        return command, outputs_dir

    def _stage_inputs(self) -> None:
        """Download the inputs; Ended when staging fails or a stop came before the start."""
        try:
            deadline = time.monotonic() + self.cfg.final_flush_seconds
            stage_code(self.client, self.workdir, self.spec.get("code"), self.log, self._interrupted, deadline)
            stage_inputs(
                self.client,
                self.workdir,
                self.spec.get("inputs") or [],
                self.log,
                self._interrupted,
                time.monotonic() + self.cfg.final_flush_seconds,
            )
            self.checkpoints.stage(self._interrupted, self.client.deadline)  # a resume
        except StagingError as exc:
            if self.client.fatal is None:
                self.log(f"input staging failed: {exc}")
                raise Ended("failed", f"input staging failed: {exc}", EXIT_STAGING_FAILED) from exc
        except StagingCancelled:
            pass
        self._check_stop()
        if self._stop_outcome is not None:
            code = EXIT_REVOKED if self.client.fatal is not None else EXIT_CANCELLED_BEFORE_START
            if self._signal is not None:
                code = 128 + self._signal
            raise Ended(
                self._stop_outcome, f"{self._stop_reason} (before the command started)", code
            )

    def _command_env(self, outputs_dir: str) -> dict[str, str]:
        """The command's environment: the executor's without its token, the spec's
        variables, and GANTRY_* naming the job, its attempt, outputs, metrics and preempt files."""
        env = dict(os.environ)
        env.pop("GANTRY_JOB_TOKEN", None)
        env.pop(sandbox.SPEC_ENV, None)
        for k, v in (self.spec.get("env") or {}).items():
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
        if self.spec.get("attempt") is not None:  # 1, then 2... for each retry
            env["GANTRY_ATTEMPT"] = str(self.spec["attempt"])
        env.update(self._mlflow_env())
        env.update(self.checkpoints.env())
        return env

    def _start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start the command (in the sandbox when there is one), in a session of its own."""
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
                raise Ended("failed", f"cannot prepare the sandbox: {exc}", EXIT_INTERNAL) from exc
            env = sandbox.sandbox_env(env, self.spec.get("env") or {}, self.workdir)
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
            self.job_limits.stop()
            self.log(f"cannot start command {command[0]!r}: {exc}")
            reason = f"cannot start command {command[0]!r}: {exc.strerror or exc}"
            if isinstance(exc, FileNotFoundError):
                reason = f"command not found: {command[0]}"
            raise Ended("failed", reason, EXIT_CANNOT_START) from exc
        self.proc = proc
        self.job_limits.watch()
        return proc

    def _watch(self, proc: subprocess.Popen[bytes], command: list[str]) -> _Watchers:
        """Threads that ship the command's output and metrics and report its start."""
        readers = [
            threading.Thread(target=self._read_stream, args=(proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._read_stream, args=(proc.stderr, "stderr"), daemon=True),
        ]
        for t in readers:
            t.start()
        tail_stop = threading.Event()
        tailer = threading.Thread(target=self._tail_metrics, args=(tail_stop,), daemon=True)
        tailer.start()
        self.gpu = start_sampler(self.spec, self.metrics.add, self.log, proc.pid)
        started_status = threading.Thread(
            target=self._post_status,
            args=({"worker": self.cfg.worker, "event": "started", "pid": proc.pid},),
            daemon=True,
        )
        started_status.start()
        self.log(f"started command (pid {proc.pid}): {shlex.join(command)}")
        return _Watchers(readers, tailer, tail_stop, started_status)

    def _limits(self) -> tuple[float | None, float]:
        """The spec's timeout (None: none) and the grace between SIGTERM and SIGKILL."""
        timeout = self.spec.get("timeout_seconds")
        timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
        grace = self.spec.get("grace_seconds")
        grace = float(grace) if isinstance(grace, (int, float)) and grace >= 0 else 10.0
        return timeout, grace

    def _supervise(self, proc: subprocess.Popen[bytes]) -> tuple[int, bool, float]:
        """Wait for the command, stopping it (SIGTERM, then SIGKILL after the grace) on a
        cancel, a preemption, a signal or the timeout. Returns (returncode, killed, grace)."""
        timeout, grace = self._limits()
        started = time.monotonic()
        term_at: float | None = None
        killed = False
        while (rc := proc.poll()) is None:
            self._check_stop()
            now = time.monotonic()
            if self._stop_outcome is None and timeout is not None and now - started >= timeout:
                self._stop_outcome = "timed_out"
                self._stop_reason = f"timed out after {_fmt_seconds(timeout)} s"
            if self._stop_outcome is not None and term_at is None:
                with contextlib.suppress(OSError):
                    open(self.preempt_file, "w").close()
                stopping = self._stop_outcome == "cancelled" and self.client.fatal is None
                if self.checkpoints.save_window(proc, stopping):  # a preemption: time to save
                    continue  # it saved and exited: no SIGTERM
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
        return rc, killed, grace

    def _drain(self, watchers: _Watchers) -> None:
        """The child exited. Grandchildren may still hold the pipes open: give the
        readers a moment, then kill whatever is left of the process group."""
        for t in watchers.readers:
            t.join(1.0)
        self._killpg(signal.SIGKILL)
        self.job_limits.stop()  # what left the process group too; the OOM count
        for t in watchers.readers:
            t.join(5.0)
        if getattr(self, "gpu", None) is not None:
            self.gpu.stop()
        watchers.tail_stop.set()
        watchers.tailer.join(5.0)
        if self.relay is not None:
            self.relay.stop()
        # From now on retries are bounded by --final-flush-seconds.
        self.client.deadline = time.monotonic() + self.cfg.final_flush_seconds
        watchers.started_status.join(max(0.0, self.client.deadline - time.monotonic()) + 1)

    def _outcome(self, rc: int, killed: bool, grace: float) -> tuple[str, str, int]:
        """The attempt's outcome, reason and exit code from the command's returncode and
        any stop that was asked for."""
        code = exit_code_for(rc)
        desc = describe_returncode(rc)
        if self._stop_outcome is not None:
            outcome = self._stop_outcome
            reason = self._stop_reason or outcome
            if killed:
                reason += f"; killed with SIGKILL after {_fmt_seconds(grace)} s grace"
            else:
                reason += f"; process {desc}"
        elif over := self.job_limits.verdict(rc):  # "out of memory: …", "disk limit …"
            outcome, reason = "failed", over
        elif rc in (126, 127) and self._exec_failure:
            outcome, reason = "failed", _exec_reason(self._exec_failure)
        elif rc == 0:
            outcome, reason = "succeeded", desc
        else:
            outcome, reason = "failed", desc
        self.log(f"command {desc}")
        return outcome, reason, code

    def _ship_outputs(
        self, outputs_dir: str, outcome: str, reason: str, code: int
    ) -> tuple[str, str, int]:
        """Upload the outputs; a success whose outputs did not all arrive is a failure."""
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
        argv = sandbox.bwrap_argv(
            box,
            command,
            workdir=self.workdir,
            state_dir=self.state_dir,
            metrics_file=self.metrics_file,
            executor_package=package,
        )
        # Its cgroup, which the command joins as it starts (LimitsError is an OSError).
        self.job_limits = JobLimits.for_sandbox(box, self.cfg.job_id, self.cfg.worker, self.workdir)
        return self.job_limits.wrap(argv)

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
                if stream == "stderr" and self._exec_failure is None and text.startswith(EXEC_FAILED):
                    self._exec_failure = text[len(EXEC_FAILED):]
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
        tail_metrics(self.metrics_file, self.metrics.add, self.log, stop)

    def _upload_outputs(self, outputs_dir: str) -> str:
        """Upload every file under outputs_dir; returns a failure note or ''."""
        return upload_outputs(self.client, self.cfg.worker, self.workdir, outputs_dir, self.log)


def _fmt_seconds(s: float) -> str:
    return str(int(s)) if float(s).is_integer() else f"{s:g}"
