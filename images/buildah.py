"""Custom image builds with a real builder: buildah (daemonless, Debian's package) pulls the
base from the registry, copies the build's files in, lets the base image's own pip install
the requirements inside a container, commits and pushes. Unlike the registry-only path
(images/builder.py), packages with compiled code work: they are installed by the image's
interpreter, for its platform, not by Gantry's.

Nothing the tenant controls runs with privileges or a network:
- wheels are fetched on this machine by `pip download --only-binary=:all:` for the image's
  Python and platform; downloading a wheel runs no code (source distributions, whose build
  would, are refused);
- in the container, the base image's pip installs them as uid 65534 with no capabilities,
  no network (`--network none`), the wheels mounted read-only, a memory limit, a process
  limit and a time limit (the base may be a tenant's own image: its pip is its code);
- files are copied by buildah itself (no process runs in the container for that), and
  every path stays inside the container's root.

The result is pushed where the registry-only path pushes (build.target), with the same
labels and PYTHONPATH, so the rest of Gantry cannot tell the two apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.files.storage import default_storage

from images.builder import PACKAGES_DIR, BuildError, pip_sources
from images.reference import parse_reference
from images.registry import RegistryClient, RegistryNotFound

BUILD_USER = "65534:65534"
STEP_TIMEOUT_SECONDS = 900
# manylinux_2_17 (CentOS 7's glibc) up to 2_31 (Ubuntu 20.04's, under many CUDA images), newest
# first: pip does not widen manylinux_2_x platforms by itself. The image's own pip checks
# again at install time, against the glibc it really has.
MANYLINUX = [f"manylinux_2_{minor}" for minor in range(31, 16, -1)] + ["manylinux2014"]


def available() -> bool:
    """Whether custom builds use buildah: GANTRY_IMAGE_BUILDER "buildah", or "auto" on a
    machine with buildah and runc where the worker runs as root (the storage under
    GANTRY_BUILDAH_STORAGE and the build containers are rootful)."""
    choice = settings.GANTRY_IMAGE_BUILDER
    if choice == "auto":
        return bool(shutil.which("buildah") and shutil.which("runc") and os.geteuid() == 0)
    return choice == "buildah"


def storage_flags() -> list[str]:
    """buildah's global flags: its own storage (vfs works on any file system and kernel)."""
    root = Path(settings.GANTRY_BUILDAH_STORAGE)
    return ["--root", str(root / "storage"), "--runroot", str(root / "run"),
            "--storage-driver", "vfs"]


def build_image(build, log: Callable[[str], None], progress: Callable[[int, str], None]):
    """Push build.target with buildah and return (digest, labels); raises BuildError."""
    base = build.base
    if base is None:
        raise BuildError("The base image was deleted before the build ran.")
    target = parse_reference(build.target)
    requirements = [r.strip() for r in build.requirements.splitlines() if r.strip()]
    registry = urlsplit(settings.GANTRY_REGISTRY_URL)
    with tempfile.TemporaryDirectory(prefix="gantry-buildah-") as tmp:
        work = Path(tmp)
        auth = _auth_file(work, registry.netloc)
        remote = ["--authfile", str(auth), f"--tls-verify={_verify(registry)}"]
        runner = _Runner(log)
        source = f"docker://{registry.netloc}/{base.repository}@{base.digest or base.tag}"
        if not base.digest:
            source = f"docker://{registry.netloc}/{base.repository}:{base.tag}"
        progress(5, "pulling the base image")
        ctr = runner.output(
            "from", "--quiet", "--pull-always", *remote,
            "--name", f"gantry-build-{build.pk}-{os.urandom(4).hex()}",
            "--memory", f"{settings.GANTRY_IMAGE_BUILD_MEMORY_MB}m",
            "--ulimit", "nproc=4096:4096", source,
        )
        try:
            progress(30, "copying files")
            _copy_files(runner, ctr, build, work / "files", log)
            if requirements:
                progress(40, "installing packages")
                wheels = work / "wheels"
                _download_wheels(requirements, base.python_version, wheels, log)
                _install_wheels(runner, ctr, requirements, wheels)
            progress(80, "committing and pushing")
            _configure(runner, ctr, build, base, bool(requirements))
            destination = f"docker://{registry.netloc}/{target.repository}:{target.tag}"
            runner.run("commit", "--quiet", *remote, ctr, destination)
        finally:
            runner.run("rm", ctr, check=False)
    with RegistryClient.from_settings() as client:
        try:
            digest = client.resolve(target.repository, target.tag)
        except RegistryNotFound as exc:
            raise BuildError(f"The registry lost {target} right after the push.") from exc
        labels = client.config(target.repository, digest)["config"].get("Labels") or {}
    log(f"pushed {target} as {digest}")
    return digest, labels


class _Runner:
    """buildah subcommands with their output streamed into the build's log."""

    def __init__(self, log):
        self.log = log
        self.runtime = ["--runtime", shutil.which("runc") or "runc"]

    def run(self, *args: str, check: bool = True, quiet: bool = False) -> str:
        command = ["buildah", *storage_flags(), *args]
        shown = " ".join(a for a in args if not a.endswith("auth.json"))
        self.log(f"$ buildah {shown}")
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECONDS,
                env=_clean_env(), check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"buildah {args[0]} did not finish within "
                             f"{STEP_TIMEOUT_SECONDS} s.") from exc
        for line in (done.stderr if quiet else done.stdout + done.stderr).splitlines():
            self.log(f"  {line}")
        self.log(f"  ({time.monotonic() - started:.1f} s, exit {done.returncode})")
        if check and done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BuildError(f"buildah {args[0]} failed: {last[:400]}")
        return done.stdout

    def output(self, *args: str) -> str:
        return self.run(*args).strip().splitlines()[-1]


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("GANTRY_", "PIP_"))}


def _verify(registry) -> str:
    return "true" if registry.scheme == "https" and settings.GANTRY_REGISTRY_VERIFY_TLS else "false"


def _auth_file(work: Path, host: str) -> Path:
    """The registry credentials in a 0600 file (never on a command line, where `ps` shows them)."""
    import base64

    token = f"{settings.GANTRY_REGISTRY_USERNAME}:{settings.GANTRY_REGISTRY_PASSWORD}"
    auths = {host: {"auth": base64.b64encode(token.encode()).decode()}}
    path = work / "auth.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps({"auths": auths if settings.GANTRY_REGISTRY_USERNAME else {}}))
    return path


def _copy_files(runner: _Runner, ctr: str, build, folder: Path, log) -> None:
    """The uploaded files, checked against their digests, copied in as root-owned 0644."""
    for item in build.files:
        with default_storage.open(item["storage"], "rb") as handle:
            data = handle.read()
        if hashlib.sha256(data).hexdigest() != item["sha256"]:
            raise BuildError(f"The stored copy of {item['path']} is damaged; upload it again.")
        local = folder / item["path"].lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        local.chmod(0o644)
        log(f"file {item['path']} ({len(data)} bytes)")
    if build.files:
        runner.run("copy", "--quiet", "--chown", "0:0", ctr, f"{folder}/", "/")


def _download_wheels(requirements: list[str], python_version: str, wheels: Path, log) -> None:
    """Wheels for the image's CPython and this machine's architecture (manylinux and pure)."""
    parts = (python_version or "").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise BuildError("The base image does not say its Python version; set it on the "
                         "image's page, then build again.")
    abi = f"cp{parts[0]}{parts[1]}"
    arch = platform.machine()
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
               "--no-input", "--only-binary=:all:", "--dest", str(wheels),
               "--python-version", ".".join(parts[:2]), "--implementation", "cp",
               "--abi", abi, "--abi", "abi3", "--abi", "none"]
    for tag in MANYLINUX:
        command += ["--platform", f"{tag}_{arch}"]
    command += [*pip_sources(), "--", *requirements]
    log(f"$ pip download --only-binary=:all: --python-version {'.'.join(parts[:2])} "
        f"--abi {abi} ({arch})")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECONDS,
                              env=_clean_env(), check=False)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"pip did not finish within {STEP_TIMEOUT_SECONDS} s.") from exc
    for line in (done.stdout + done.stderr).splitlines():
        log(f"  {line}")
    if done.returncode != 0:
        raise BuildError(f"pip found no wheel of the requirements for CPython "
                         f"{'.'.join(parts[:2])} on {arch} (source-only packages are not "
                         "built: their setup would run code); see the log.")


def _install_wheels(runner: _Runner, ctr: str, requirements: list[str], wheels: Path) -> None:
    """The base image's pip installs the wheels into PACKAGES_DIR, offline, as uid 65534."""
    (wheels / "requirements.txt").write_text("\n".join(requirements) + "\n")
    for path in [wheels, *wheels.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    empty = wheels.parent / "empty"
    empty.mkdir()
    # The target, owned by the build user, made by buildah (no process in the container).
    runner.run("copy", "--quiet", "--chown", BUILD_USER, ctr, f"{empty}/", f"/{PACKAGES_DIR}")
    runner.run(
        "run", *runner.runtime, "--network", "none", "--user", BUILD_USER, "--cap-drop", "ALL",
        "--env", "HOME=/tmp", "--env", "PIP_NO_CACHE_DIR=1",
        "--volume", f"{wheels}:/gantry-wheels:ro", ctr, "--",
        "python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
        "--no-index", "--find-links", "/gantry-wheels", "--no-compile",
        "--target", f"/{PACKAGES_DIR}", "-r", "/gantry-wheels/requirements.txt",
    )


def _configure(runner: _Runner, ctr: str, build, base, packages: bool) -> None:
    """PYTHONPATH for the installed packages and the labels the registry-only path writes."""
    args = []
    if packages:
        info = json.loads(runner.run("inspect", "--type", "container", ctr, quiet=True))
        env = info.get("OCIv1", {}).get("config", {}).get("Env") or []
        old = next((e.split("=", 1)[1] for e in env if e.startswith("PYTHONPATH=")), "")
        args += ["--env", f"PYTHONPATH=/{PACKAGES_DIR}" + (f":{old}" if old else "")]
    for key, value in {
        "org.opencontainers.image.base.name": f"{base.registry}/{base.repository}",
        "org.opencontainers.image.base.digest": base.digest or "",
        "org.gantry.build": str(build.pk),
    }.items():
        args += ["--label", f"{key}={value}"]
    runner.run("config", *args, ctr)
