"""Datasets built the way a user builds them: through the services and the upload protocol."""

import hashlib
import io

from datasets.models import Dataset, DatasetFile, DatasetVersion, UploadSession
from datasets.services import catalog, commits, uploads


def upload_files(actor, dataset, files: dict[str, bytes], **kwargs) -> UploadSession:
    """Open an upload, send every part (filesystem protocol), and commit it in-line."""
    session = uploads.start_upload(
        actor, dataset, files=[{"path": p, "size": len(b)} for p, b in files.items()], **kwargs
    )
    send_parts(actor, session, files)
    uploads.commit_upload(actor, session)
    return commits.finish_commit(session.pk)


def send_parts(actor, session, files: dict[str, bytes], only=None) -> None:
    for f in session.files.all():
        data = files[f.path]
        for n in range(1, f.part_count + 1):
            if only is not None and (f.path, n) not in only:
                continue
            chunk = data[(n - 1) * session.part_size : n * session.part_size]
            uploads.receive_part(
                actor, session, f, n, io.BytesIO(chunk), hashlib.sha256(chunk).hexdigest()
            )


def access_objects(tenant, project, owner):
    """One object of each dataset model a URL can name (for tests/test_access.py)."""
    dataset = catalog.create_dataset(owner, project, name="Digits", slug="digits")
    committed = upload_files(owner, dataset, {"train.csv": b"a,b\n1,2\n"})
    open_upload = uploads.start_upload(
        owner, dataset, files=[{"path": "more.txt", "size": 4}], message="in flight"
    )
    version = committed.version
    return {
        Dataset: dataset,
        DatasetVersion: version,
        DatasetFile: version.files.get(path="train.csv"),
        UploadSession: open_upload,
    }
