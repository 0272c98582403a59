"""Output files (artifacts) that executors upload when a job ends."""

from __future__ import annotations

import hashlib
import re
import tempfile

from django.core.files import File
from django.core.files.storage import default_storage
from django.utils import timezone

from jobs.models import Artifact, Job


def _safe_relative_path(path: str) -> str:
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or any(p in ("", ".", "..") for p in parts)
        or len(path) > 900
    ):
        raise ValueError(f"refused artifact path {path!r:.200}")
    return path


def store_artifact(job: Job, rank: int, path: str, stream, sha256: str) -> tuple[Artifact, bool]:
    """Stream one output file into the default storage; idempotent on (worker, path, sha256).

    Returns (artifact, created). ValueError when the content does not match `sha256`.
    """
    path = _safe_relative_path(path)
    sha256 = (sha256 or "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError("X-Gantry-Sha256 must be a hex sha256")
    digest = hashlib.sha256()
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as tmp:
        while chunk := stream.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            tmp.write(chunk)
        if digest.hexdigest() != sha256:
            raise ValueError(
                f"content does not match X-Gantry-Sha256 (got {digest.hexdigest()}, {size} bytes)"
            )
        existing = Artifact.objects.filter(job=job, worker=rank, path=path).first()
        if existing and existing.sha256 == sha256:
            return existing, False
        prefix = f"worker-{rank}/" if rank else ""
        name = f"jobs/{job.pk}/outputs/{prefix}{path}"
        if existing:
            existing.file.delete(save=False)
        elif default_storage.exists(name):
            default_storage.delete(name)
        tmp.seek(0)
        saved = default_storage.save(name, File(tmp, name=name))
    artifact, created = Artifact.objects.update_or_create(
        job=job,
        worker=rank,
        path=path,
        defaults={"size": size, "sha256": sha256, "file": saved, "created_at": timezone.now()},
    )
    return artifact, created
