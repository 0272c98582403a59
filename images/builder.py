"""Build a custom image without a container engine: one new layer on top of a base image,
written through the registry's HTTP API.

The layer holds the user's files and the packages pip installs *on this machine*
with `--target` for the base image's Python version. pip can do that only for
pure-Python wheels (`py3-none-any`): anything with compiled code would need the
image's own interpreter and libraries, that is, a container runtime. Packages go
to /opt/gantry/python, which the new image puts on PYTHONPATH.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.files.storage import default_storage
from django.utils import timezone

from images.reference import parse_reference
from images.registry import (
    DOCKER_CONFIG,
    DOCKER_LAYER_GZIP,
    DOCKER_MANIFEST,
    OCI_CONFIG,
    OCI_LAYER_GZIP,
    RegistryClient,
    RegistryNotFound,
)

PACKAGES_DIR = "opt/gantry/python"
PIP_TIMEOUT_SECONDS = 600


class BuildError(Exception):
    """The build cannot go on; the message is shown on the build page."""


def pip_sources() -> list[str]:
    """Where builds' pip looks for packages (GANTRY_PIP_*), as pip's options."""
    options = ["--no-index"] if settings.GANTRY_PIP_NO_INDEX else []
    if settings.GANTRY_PIP_INDEX_URL:
        options += ["--index-url", settings.GANTRY_PIP_INDEX_URL]
    if settings.GANTRY_PIP_FIND_LINKS:
        options += ["--find-links", settings.GANTRY_PIP_FIND_LINKS]
    return options


def pip_install(requirements: list[str], python_version: str, target: Path, log) -> None:
    """Pure-Python wheels for `python_version`, installed into `target` (never run here)."""
    major_minor = ".".join(python_version.split(".")[:2])
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--no-compile",
        "--target",
        str(target),
        "--only-binary=:all:",
        "--platform",
        "any",
        "--implementation",
        "py",
        "--abi",
        "none",
        "--python-version",
        major_minor,
    ]
    command += [*pip_sources(), "--", *requirements]
    log(f"$ pip install --target … --python-version {major_minor} (pure-Python wheels only)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GANTRY_", "PIP_"))}
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_SECONDS,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"pip did not finish within {PIP_TIMEOUT_SECONDS} s.") from exc
    for line in (result.stdout + result.stderr).splitlines():
        log(f"  {line}")
    if result.returncode != 0:
        raise BuildError(
            "pip could not install the packages as pure-Python wheels for Python "
            f"{major_minor}. Packages with compiled code need a container runtime to install; "
            "build those images from a Dockerfile instead."
        )


def _add(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = mode
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def make_layer(entries: list[tuple[str, bytes, int]]) -> tuple[bytes, str]:
    """A gzipped tar of `entries` ([(path without leading /, data, mode)]), reproducible:
    fixed times and owners, sorted names. Returns (compressed bytes, diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = set()
        for path, _, _ in entries:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        for directory in sorted(dirs):
            _add(tar, directory, None, 0o755)
        for path, data, mode in sorted(entries):
            _add(tar, path, data, mode)
    raw_bytes = raw.getvalue()
    diff_id = "sha256:" + hashlib.sha256(raw_bytes).hexdigest()
    compressed = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0) as gz:
        gz.write(raw_bytes)
    return compressed.getvalue(), diff_id


def build_image(build, log: Callable[[str], None], progress: Callable[[int, str], None]):
    """Push build.target and return (digest, labels). Raises BuildError or RegistryError.

    The steps: read the base image, gather the new layer's files (uploaded files and
    pip-installed requirements), push the layer beside the base's, then the config and
    the manifest that add it.
    """
    base = build.base
    if base is None:
        raise BuildError("The base image was deleted before the build ran.")
    target = parse_reference(build.target)
    client = RegistryClient.from_settings()
    with client:
        progress(5, "reading the base image")
        source_ref = base.digest or base.tag
        log(f"base: {base.registry}/{base.repository}@{source_ref}")
        manifest = client.platform_manifest(base.repository, source_ref)
        config = json.loads(client.blob(base.repository, manifest.data["config"]["digest"]))
        log(
            f"base manifest {manifest.digest} ({manifest.media_type}), {len(manifest.layers)} layers"
        )
        entries = _uploaded_files(build, log)
        requirements = [r for r in build.requirements.splitlines() if r.strip()]
        if requirements:
            progress(15, "installing packages")
            entries += _installed_packages(requirements, base.python_version, log)

        progress(45, "writing the layer")
        layer, diff_id = make_layer(entries)
        log(f"new layer: {len(entries)} files, {len(layer)} bytes compressed, diff_id {diff_id}")

        progress(55, "pushing layers")
        repository = target.repository
        _copy_base_layers(client, manifest, base.repository, repository, log)
        layer_digest = client.upload_blob(repository, layer)
        log(f"pushed layer {layer_digest}")

        progress(75, "writing the image config")
        labels = _extend_config(config, build, base, manifest, diff_id, bool(requirements))
        config_bytes = json.dumps(config, separators=(",", ":")).encode()
        config_digest = client.upload_blob(repository, config_bytes)

        progress(90, "pushing the manifest")
        docker = manifest.media_type == DOCKER_MANIFEST
        new_manifest = dict(manifest.data)
        new_manifest["config"] = {
            "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
            "digest": config_digest,
            "size": len(config_bytes),
        }
        new_manifest["layers"] = [
            *manifest.layers,
            {
                "mediaType": DOCKER_LAYER_GZIP if docker else OCI_LAYER_GZIP,
                "digest": layer_digest,
                "size": len(layer),
            },
        ]
        body = json.dumps(new_manifest, separators=(",", ":")).encode()
        digest = client.put_manifest(repository, target.tag, manifest.media_type, body)
        try:
            check = client.resolve(repository, target.tag)
        except RegistryNotFound as exc:
            raise BuildError(f"The registry lost {target} right after the push.") from exc
        log(f"pushed {target} as {check}")
        if check != digest:
            log(f"note: the registry reports {check}, the push answered {digest}")
        return check, labels


def _uploaded_files(build, log) -> list[tuple[str, bytes, int]]:
    """The build's uploaded files as layer entries, each checked against its digest."""
    entries = []
    for item in build.files:
        with default_storage.open(item["storage"], "rb") as handle:
            data = handle.read()
        if hashlib.sha256(data).hexdigest() != item["sha256"]:
            raise BuildError(f"The stored copy of {item['path']} is damaged; upload it again.")
        entries.append((item["path"].lstrip("/"), data, 0o644))
        log(f"file {item['path']} ({len(data)} bytes)")
    return entries


def _installed_packages(requirements: list[str], python_version, log) -> list[tuple[str, bytes, int]]:
    """The requirements pip-installed for the base's Python, as entries under PACKAGES_DIR."""
    entries = []
    with tempfile.TemporaryDirectory(prefix="gantry-build-") as tmp:
        site = Path(tmp) / "site"
        pip_install(requirements, python_version, site, log)
        for path in sorted(site.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = path.relative_to(site).as_posix()
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                entries.append((f"{PACKAGES_DIR}/{rel}", path.read_bytes(), mode))
    log(f"{len(requirements)} requirement(s) installed under /{PACKAGES_DIR}")
    return entries


def _copy_base_layers(client, manifest, base_repository: str, repository: str, log) -> None:
    """Make the base's layers present in the target repository: mounted where the registry
    can, copied where it cannot."""
    for existing in manifest.layers:
        digest = existing["digest"]
        if client.blob_exists(repository, digest):
            continue
        if repository == base_repository or not client.mount_blob(
            repository, digest, base_repository
        ):
            client.upload_blob(repository, client.blob(base_repository, digest))
        log(f"layer {digest[:19]} is in {repository}")


def _extend_config(config: dict, build, base, manifest, diff_id: str, packages: bool) -> dict:
    """Add the new layer to the image config (in place): PYTHONPATH for the installed
    packages, labels naming the base and the build, a history entry. Returns the labels."""
    inner = config.setdefault("config", {})
    env = [e for e in inner.get("Env") or [] if not e.startswith("PYTHONPATH=")]
    old_path = next(
        (e.split("=", 1)[1] for e in inner.get("Env") or [] if e.startswith("PYTHONPATH=")),
        "",
    )
    if packages:
        env.append(f"PYTHONPATH=/{PACKAGES_DIR}" + (f":{old_path}" if old_path else ""))
    elif old_path:
        env.append(f"PYTHONPATH={old_path}")
    inner["Env"] = env
    labels = dict(inner.get("Labels") or {})
    labels.update(
        {
            "org.opencontainers.image.base.name": f"{base.registry}/{base.repository}",
            "org.opencontainers.image.base.digest": manifest.digest,
            "org.gantry.build": str(build.pk),
        }
    )
    inner["Labels"] = labels
    config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(diff_id)
    now = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    config["created"] = now
    requirements = len([r for r in build.requirements.splitlines() if r.strip()])
    config.setdefault("history", []).append(
        {
            "created": now,
            "created_by": f"gantry build #{build.pk}",
            "comment": f"{len(build.files)} file(s), {requirements} package(s)",
        }
    )
    return labels
