"""An endpoint's replicas on the local backend: sandboxed MLServer processes on this machine.

Each replica of a model version is `runtime/serve_model.py` under the serving
virtualenv's Python (.venv-serving), run as jobs' TensorBoard is: a bubblewrap
sandbox of its own (mount, PID, IPC, UTS and network namespaces: loopback only), as an
unprivileged uid of the job range, held to the endpoint's memory and CPUs in a cgroup
of its own (jobs' sandbox module decides whether this machine can and builds the
cgroup command). It sees /usr, the interpreter, the model's files read-only at /model
and a folder for its socket; nothing of Gantry, its data or other jobs.

The only way in is the replica's Unix socket. Gantry's gateway opens it by descriptor
(O_PATH, O_NOFOLLOW, checked to be a socket owned by the replica's uid) and connects
through /proc/self/fd/<n>: the replica's user owns the socket's folder and could swap
the socket for a link, which root then must not follow.

A replica stops itself after the endpoint's idle time (scale to zero); the next request
starts it again (endpoints.gateway). Replicas are found by their pid files, so any
process of Gantry (web workers, tests, `manage.py`) sees and stops the same ones. When
each ran is recorded for usage reports (endpoints.usage): here as a replica starts and
stops, and by the minute's pass (`record_replicas`) for those that stopped by themselves.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml
from django.conf import settings
from django.utils import timezone

from endpoints import kubernetes, usage
from jobs.compute import sandbox
from jobs.compute.local import process_matches, process_start_time, process_tree, stop_processes
from modelhub.models import ModelFormat, ModelVersion

SERVER_SCRIPT = Path(__file__).parent / "runtime" / "serve_model.py"
INSIDE_SCRIPT = "/run/gantry/serve_model.py"
# The runtime it serves with, imported from beside it (the script's folder is on its path).
RUNTIME_MODULE = SERVER_SCRIPT.with_name("gantry_runtime.py")
INSIDE_RUNTIME = "/run/gantry/gantry_runtime.py"
INSIDE_MODEL = "/model"
INSIDE_RUN = "/run/endpoint"
SOCKET = "mlserver.sock"
READY_TIMEOUT = 120.0


class ReplicaError(Exception):
    """A replica could not be started or did not become ready; the message says why."""


def root_dir() -> Path:
    return Path(settings.GANTRY_JOBS_DIR) / "_endpoints"


def serving_python() -> str:
    """The serving virtualenv's Python (`make install` builds it from runtime/requirements.txt)."""
    return str(Path(settings.BASE_DIR) / ".venv-serving" / "bin" / "python")


def endpoint_uid(endpoint_pk: int) -> int:
    """The uid an endpoint's replicas run as: the helper servers' band at the top of the
    sandbox range, never a job's or Gantry's; Gantry's own where nothing is sandboxed."""
    if not sandbox.sandbox_status().available:
        return os.getuid()
    return sandbox.server_uid(endpoint_pk)


# --- the model's files ------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """How a replica serves a model version: what its runtime loads (a file, or for the
    MLflow runtime the model's folder), relative to the version's folder; the runtime's
    name (RUNTIMES in runtime/serve_model.py); and the libraries the model's MLflow
    flavor imports beyond MLflow (MLFLOW_FLAVOR_LIBRARIES), which the serving
    environment must have."""

    path: str
    runtime: str
    libraries: tuple[str, ...] = ()

    @property
    def needs_torch(self) -> bool:
        """TorchScript, or an MLflow flavor that loads with torch (mlflow.pytorch): on
        Kubernetes such a version runs in GANTRY_K8S_TORCH_IMAGE."""
        return self.runtime == "torchscript" or "torch" in self.libraries


SERVED_FORMATS = "MLflow models (pyfunc) and TorchScript models"

# The library an MLflow flavor's loader imports (MLmodel's python_function
# loader_module), by its import name: a model of that flavor fails to load without it.
MLFLOW_FLAVOR_LIBRARIES = {
    "mlflow.pytorch": "torch",
    "mlflow.tensorflow": "tensorflow",
    "mlflow.keras": "keras",
    "mlflow.xgboost": "xgboost",
    "mlflow.lightgbm": "lightgbm",
    "mlflow.catboost": "catboost",
    "mlflow.onnx": "onnxruntime",
    "mlflow.transformers": "transformers",
    "mlflow.sentence_transformers": "sentence_transformers",
    "mlflow.statsmodels": "statsmodels",
    "mlflow.prophet": "prophet",
    "mlflow.spacy": "spacy",
}


def served_file(version: ModelVersion) -> Served:
    """What serves `version`: MLflow models of the sklearn flavor (what
    `mlflow.sklearn.log_model` stores) with MLServer's scikit-learn runtime (checked, and
    faster to start than MLflow's), other MLflow models with the python_function flavor
    (`mlflow.pyfunc.save_model`, and most flavors' log_model) with MLServer's MLflow
    runtime, TorchScript archives (`torch.jit.save`) with Gantry's TorchScript runtime.
    A ValueError says why anything else is not served."""
    if version.format == ModelFormat.TORCHSCRIPT:
        return Served(version.primary_file, "torchscript")
    if version.format == ModelFormat.PYTORCH:
        raise ValueError(
            f"{version} is a PyTorch file ({version.primary_file}), which holds weights "
            "(a state_dict) or pickled objects: a state_dict cannot be served without its "
            "code. Save the model with torch.jit.script (or torch.jit.trace) and "
            "torch.jit.save, and register that file as a TorchScript version."
        )
    if version.format != ModelFormat.MLFLOW:
        raise ValueError(
            f"{version} is in the {version.get_format_display()} format; endpoints serve "
            f"{SERVED_FORMATS} for now."
        )
    flavors = _mlflow_flavors(version)
    base = (version.primary_file or "MLmodel").rpartition("/")[0]
    sklearn = flavors.get("sklearn")
    pyfunc = flavors.get("python_function")
    if isinstance(sklearn, dict) and isinstance(sklearn.get("pickled_model"), str):
        if sklearn.get("serialization_format", "cloudpickle") in ("cloudpickle", "pickle"):
            pickled = sklearn["pickled_model"]
            return Served(f"{base}/{pickled}" if base else pickled, "sklearn")
        if not isinstance(pyfunc, dict):
            raise ValueError(
                f"{version} is saved as {sklearn['serialization_format']}; MLServer's "
                "scikit-learn runtime loads pickle and cloudpickle files."
            )
    if isinstance(pyfunc, dict):
        library = MLFLOW_FLAVOR_LIBRARIES.get(pyfunc.get("loader_module"))
        # The folder holding MLmodel; "." where it is the version's own.
        return Served(base or ".", "mlflow", (library,) if library else ())
    shown = ", ".join(sorted(flavors)) or "none"
    raise ValueError(
        f"{version} has neither the scikit-learn nor the python_function flavor (its "
        f"flavors: {shown}); endpoints serve {SERVED_FORMATS} for now."
    )


def _mlflow_flavors(version: ModelVersion) -> dict:
    """The flavors the version's MLmodel names; a ValueError where it has none to read."""
    mlmodel = version.files.filter(path=version.primary_file or "MLmodel").first()
    if mlmodel is None:
        raise ValueError(f"{version} has no MLmodel file.")
    with mlmodel.file.open("rb") as handle:
        try:
            described = yaml.safe_load(handle.read(1_000_000)) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{version}'s MLmodel is not YAML: {exc}") from None
    flavors = described.get("flavors") if isinstance(described, dict) else None
    return flavors if isinstance(flavors, dict) else {}


def model_file_in(version: ModelVersion, backend: str | None = None) -> str:
    """The file the version's runtime loads (served_file), once the backend can serve
    it (`runtime_missing`; the endpoint's backend, else the configured one)."""
    served = served_file(version)
    missing = runtime_missing(served, backend or settings.GANTRY_JOB_BACKEND)
    if missing:
        raise ValueError(missing)
    return served.path


def runtime_missing(served: Served, backend: str = "local") -> str:
    """Why `backend` cannot run what serves a version (`served`), in words; empty when it
    can. TorchScript needs PyTorch, an MLflow model the libraries its flavor imports
    (Served.libraries): each looked for in the serving environment on the local backend
    (never imported: the platform never imports torch or MLflow's flavors); on
    Kubernetes a model needing torch runs in GANTRY_K8S_TORCH_IMAGE."""
    if backend == "kubernetes" and served.needs_torch:
        if settings.GANTRY_K8S_TORCH_IMAGE:
            return ""
        return (
            "Endpoints whose model needs PyTorch (TorchScript, MLflow's pytorch flavor) run "
            "on Kubernetes in a serving image with PyTorch, and GANTRY_K8S_TORCH_IMAGE names "
            "none: build platform/images/serving with --build-arg TORCH=1 (or use an MLServer "
            "1.7.1 image with torch and mlserver-mlflow) and set it."
        )
    if served.runtime == "torchscript":
        return _torchscript_missing()
    if served.runtime == "mlflow":
        return _mlflow_missing(backend, served.libraries)
    return ""


def _torchscript_missing() -> str:
    """PyTorch in the local backend's serving environment."""
    if _in_serving("torch"):
        return ""
    serving = Path(serving_python()).parents[1]
    return (
        f"TorchScript endpoints need PyTorch in the serving environment ({serving.name}), "
        "and it has none: run `make serving-torch` (PyPI's CUDA build: 4.6 GiB, under a "
        "minute on a fast link)."
    )


def _mlflow_missing(backend: str, libraries: tuple[str, ...]) -> str:
    """The flavor's libraries in the serving environment. On Kubernetes an image's
    libraries are not known here (a missing one fails the pod's load, in MLflow's
    words), but Seldon's scikit-learn image, GANTRY_K8S_ENDPOINT_IMAGE's default, is
    known to lack MLServer's MLflow runtime itself."""
    if backend == "kubernetes":
        if settings.GANTRY_K8S_ENDPOINT_IMAGE != kubernetes.ENDPOINT_IMAGE:
            return ""
        return (
            "MLflow endpoints on Kubernetes need MLServer's MLflow runtime (mlserver-mlflow) "
            f"in the serving image, and GANTRY_K8S_ENDPOINT_IMAGE is Seldon's scikit-learn "
            f"image ({kubernetes.ENDPOINT_IMAGE}), which has none: build "
            "platform/images/serving (platform/dev/images-build) and set it."
        )
    absent = [library for library in libraries if not _in_serving(library)]
    if not absent:
        return ""
    serving = Path(serving_python()).parents[1].name
    named = " and ".join(absent)
    todo = "run `make serving-torch`" if absent == ["torch"] else f"pip install {named} there"
    return (
        f"This MLflow model's flavor needs {named} in the serving environment ({serving}), "
        f"and it has none: {todo}. A model runs with the serving environment's libraries; "
        "its own requirements are not installed."
    )


def _in_serving(module: str) -> bool:
    """Whether the serving environment has the package `module` (its folder, looked for:
    never imported here)."""
    serving = Path(serving_python()).parents[1]
    return any(serving.glob(f"lib/python3*/site-packages/{module}/__init__.py"))


def model_dir(version: ModelVersion) -> Path:
    """The version's files on this machine (copied from storage once), readable by all:
    replicas see them read-only."""
    target = root_dir() / "models" / str(version.pk)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(root_dir(), 0o755)
    os.chmod(target.parent, 0o755)
    partial = target.parent / f".{version.pk}.{os.getpid()}.{time.monotonic_ns()}"
    partial.mkdir(mode=0o755)
    try:
        for stored in version.files.all():
            dest = partial / stored.path
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            with stored.file.open("rb") as source, open(dest, "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(dest, 0o644)
        os.rename(partial, target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if not target.is_dir():
            raise
    return target


# --- replicas ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Replica:
    """Replica `index` of model version `version_pk` behind endpoint `endpoint_pk`."""

    endpoint_pk: int
    version_pk: int
    index: int = 0

    @property
    def name(self) -> str:
        return f"{self.endpoint_pk}-{self.version_pk}-{self.index}"

    @property
    def run_dir(self) -> Path:
        return root_dir() / "run" / self.name

    @property
    def socket_dir(self) -> Path:
        return self.run_dir / "s"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "pid.json"

    @property
    def uid(self) -> int:
        return endpoint_uid(self.endpoint_pk)


def replicas_of(endpoint, version_pk: int) -> list[Replica]:
    return [Replica(endpoint.pk, version_pk, i) for i in range(max(1, endpoint.replicas))]


def running(replica: Replica) -> bool:
    try:
        known = json.loads(replica.pid_file.read_text())
    except (OSError, ValueError):
        return False
    return process_matches(known.get("pid"), known.get("start"))


def open_socket(replica: Replica) -> int:
    """An O_PATH descriptor of the replica's socket, refused unless it is a socket owned
    by the replica's uid (never a link its user put there). Raises OSError."""
    dir_fd = os.open(replica.socket_dir, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(SOCKET, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != replica.uid:
        os.close(fd)
        raise OSError(f"{replica.name}: the socket is not the replica's")
    return fd


def ready(replica: Replica, model_name: str) -> bool:
    """Whether the replica answers 200 on /v2/models/<name>/ready."""
    try:
        fd = open_socket(replica)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(f"/proc/self/fd/{fd}")
            sock.sendall(
                f"GET /v2/models/{model_name}/ready HTTP/1.1\r\nHost: replica\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
    finally:
        os.close(fd)


def start(endpoint, version: ModelVersion, replica: Replica) -> bool:
    """Start `replica` unless it runs; True when this call started it."""
    served = served_file(version)
    missing = runtime_missing(served, "local")
    if missing:
        raise ReplicaError(missing)
    model = model_dir(version)
    replica.run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(replica.run_dir.parent / f"{replica.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if running(replica):
            return False
        record_gone(replica)  # before its log goes: the last run's end is read from it
        shutil.rmtree(replica.run_dir, ignore_errors=True)
        replica.run_dir.mkdir(mode=0o755)
        replica.socket_dir.mkdir(mode=0o700)
        os.chown(replica.socket_dir, replica.uid, replica.uid)
        argv = sandbox.in_own_cgroup(
            _Limits(endpoint.pk * 1000 + replica.index, endpoint.memory_mb, endpoint.cpus),
            f"endpoint-{replica.name}",
            server_argv(endpoint, version, replica, model, served),
        )
        now = timezone.now()
        with open(replica.run_dir / "replica.log", "ab") as log:
            process = subprocess.Popen(
                argv,
                cwd=replica.socket_dir,
                env=_environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        started = process_start_time(process.pid)
        replica.pid_file.write_text(json.dumps({"pid": process.pid, "start": started}))
        if started is not None:
            usage.opened(endpoint.pk, replica.name, version.number, process.pid, started, now)
        return True


def wait_ready(replica: Replica, model_name: str, timeout: float = READY_TIMEOUT) -> None:
    """Block until the replica answers ready; ReplicaError (with its log's end) if it
    exits or does not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready(replica, model_name):
        if not running(replica):
            raise ReplicaError(f"the model server exited: {log_tail(replica)}")
        if time.monotonic() > deadline:
            raise ReplicaError(f"the model server was not ready in {timeout:.0f} s")
        time.sleep(0.05)


def log_tail(replica: Replica, lines: int = 5) -> str:
    try:
        text = (replica.run_dir / "replica.log").read_text(errors="replace")
    except OSError:
        return "no log"
    return " | ".join(text.strip().splitlines()[-lines:])[-800:]


def stop(replica: Replica, grace: float = 5.0) -> bool:
    """Stop the replica (SIGTERM: MLServer finishes the requests it holds; SIGKILL after
    `grace` seconds); False when it was not running."""
    try:
        known = json.loads(replica.pid_file.read_text())
    except (OSError, ValueError):
        return False
    if not process_matches(known.get("pid"), known.get("start")):
        record_gone(replica)
        return False
    stop_processes(process_tree(known["pid"]), grace)
    record_gone(replica)
    return True


def all_replicas() -> list[Replica]:
    found = []
    for path in sorted((root_dir() / "run").glob("*/pid.json")):
        parts = path.parent.name.split("-")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            found.append(Replica(*map(int, parts)))
    return found


def stop_all(endpoint_pk: int | None = None) -> int:
    """Stop every running replica on this machine (of one endpoint, if given)."""
    return sum(
        stop(r) for r in all_replicas() if endpoint_pk is None or r.endpoint_pk == endpoint_pk
    )


# --- when replicas ran (endpoints.usage) -------------------------------------------------


def record_gone(replica: Replica, now=None) -> int:
    """Close the open intervals of the replica's processes that no longer run; how many."""
    return _close_gone(usage.open_intervals(replica.name), now or timezone.now())


def _close_gone(intervals, now) -> int:
    """Close those of `intervals` whose process is gone, each at its replica's log's last
    write (the replica's own output: a server stopping says so), kept between when it was
    last seen running and now."""
    gone = 0
    for interval in intervals:
        if process_matches(interval.pid, interval.process_start):
            continue
        try:
            written = _aware(os.stat(root_dir() / "run" / interval.replica / "replica.log").st_mtime)
        except OSError:
            written = interval.seen_at
        usage.closed(interval, min(now, written))
        gone += 1
    return gone


def record_replicas(now=None) -> dict:
    """The minute's pass over when replicas ran: each open interval whose process runs is
    seen now, the others are closed (`_close_gone`); a running replica without one (its
    start not recorded) gets one from when its pid file was written."""
    now = now or timezone.now()
    alive, known, gone = [], set(), []
    for interval in usage.open_intervals():
        if process_matches(interval.pid, interval.process_start):
            alive.append(interval.pk)
            known.add((interval.replica, interval.pid, interval.process_start))
        else:
            gone.append(interval)
    usage.seen(alive, now)
    closed = _close_gone(gone, now)
    opened = 0
    for replica in all_replicas():
        try:
            written = _aware(replica.pid_file.stat().st_mtime)
            process = json.loads(replica.pid_file.read_text())
        except (OSError, ValueError):
            continue
        pid, started = process.get("pid"), process.get("start")
        if (replica.name, pid, started) in known or not process_matches(pid, started):
            continue
        at = min(now, written)
        opened += usage.opened(replica.endpoint_pk, replica.name, None, pid, started, at) is not None
    return {"running": len(alive) + opened, "opened": opened, "closed": closed}


def _aware(timestamp: float):
    return datetime.fromtimestamp(timestamp, tz=UTC)


@dataclass(frozen=True)
class _Limits:
    """What jobs' cgroup helper reads of a job: its name's number, memory and CPUs."""

    pk: int
    memory_mb: int
    cpus: int


def _environment() -> dict[str, str]:
    return {
        **sandbox.SERVER_ENVIRONMENT,
        # One thread per BLAS pool: the replica's CPUs are the endpoint's, not the host's.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }


def server_argv(endpoint, version, replica: Replica, model: Path, served: Served) -> list[str]:
    """The replica's command line: sandboxed where jobs are."""
    python = serving_python()
    args = [endpoint.name, f"v{version.number}", str(endpoint.idle_seconds)]
    status = sandbox.sandbox_status()
    if not status.available:
        # Relative to the working directory (the socket folder): a socket path is at most
        # 107 bytes, and a data directory can be deep.
        script = [str(SERVER_SCRIPT), SOCKET, served.runtime, str(model / served.path)]
        return [python, *script, *args]
    binds = ["--ro-bind", str(SERVER_SCRIPT), INSIDE_SCRIPT]
    binds += ["--ro-bind", str(RUNTIME_MODULE), INSIDE_RUNTIME]
    binds += ["--ro-bind", str(model), INSIDE_MODEL, "--bind", str(replica.socket_dir), INSIDE_RUN]
    # No --die-with-parent: its signal follows the *thread* that started the replica (a
    # roll's thread ends right after), not Gantry's process. A replica outlives the web
    # process until its idle time (the next process finds it by its pid file).
    command = [INSIDE_SCRIPT, f"{INSIDE_RUN}/{SOCKET}", served.runtime]
    command += [f"{INSIDE_MODEL}/{served.path}", *args]
    return sandbox.server_sandbox(status, python, replica.uid, binds, command)
