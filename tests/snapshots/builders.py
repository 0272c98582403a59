"""Snapshots built through the services, as the API would build them."""

import hashlib
import io

from snapshots import services


def manifest(files: dict[str, bytes], executable=()) -> list[dict]:
    return [
        {
            "path": path,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "mode": 0o755 if path in executable else 0o644,
        }
        for path, data in files.items()
    ]


def make_snapshot(actor, project, files: dict[str, bytes], git=None, executable=()):
    """A ready snapshot of `files` (path -> bytes)."""
    snapshot, missing = services.create_snapshot(
        actor, project, manifest(files, executable), git
    )
    by_sha = {hashlib.sha256(data).hexdigest(): data for data in files.values()}
    for sha in missing:
        services.receive_blob(actor, snapshot, sha, io.BytesIO(by_sha[sha]))
    return services.finalize_snapshot(actor, snapshot)
