"""Checkpoints built the way the executor builds them: begin, upload, commit."""

import hashlib
import io

from checkpoints.models import Checkpoint
from checkpoints.services import begin_checkpoint, commit_checkpoint, receive_file


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def saved(job, name="step-1", files=None, step=1, metrics=None) -> Checkpoint:
    """A complete checkpoint of `job` with `files` ({path: bytes})."""
    files = files or {"model.pt": f"weights of {name}".encode()}
    body = {
        "name": name,
        "step": step,
        "metrics": metrics or {},
        "files": [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in files.items()],
    }
    checkpoint = begin_checkpoint(job, body)
    for path, data in files.items():
        receive_file(checkpoint, path, io.BytesIO(data), sha(data))
    return commit_checkpoint(checkpoint)


def access_objects(owner, project):
    """One complete checkpoint for tests/test_access.py's walk of every page."""
    from jobs.services.submit import submit_job

    job = submit_job(owner, project, name="ckpt", command="python -c pass")
    return {Checkpoint: saved(job)}
