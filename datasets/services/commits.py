"""The commit task's body: every file's parts become a blob (its sha256 computed from
the bytes themselves), then the upload becomes a version in one transaction."""

from __future__ import annotations

import io
import logging

from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.utils import timezone

from datasets import storage
from datasets.models import Blob, UploadFile, UploadSession, UploadState, VersionSource, blob_key
from datasets.services.paths import EMPTY_SHA256
from datasets.services.staging import discard_staging, forget_parts, gateway_parts, part_bounds
from datasets.services.versions import create_version

logger = logging.getLogger(__name__)


class CommitProblem(Exception):
    """A commit cannot finish as things stand; the message says what to do."""


def finish_commit(session_id: int) -> UploadSession:
    """The body of the commit task. On a damaged part or an unreachable store the upload
    goes back to open with a message (parts that arrived are kept, so it resumes)."""
    session = UploadSession.objects.select_related("dataset__project__tenant").get(pk=session_id)
    if session.state != UploadState.COMMITTING:
        return session
    try:
        blobs: dict[str, Blob] = {}
        for file in session.files.all().order_by("path"):
            if file.blob_id is None:
                _assemble(session, file)
            blobs[file.path] = file.blob
        version = create_version(
            session.created_by,
            session.dataset,
            parent=session.parent,
            new_files=blobs,
            remove=session.remove_paths,
            source=VersionSource.UPLOAD,
            source_detail={"upload": session.pk},
            message=session.message,
        )
    except (CommitProblem, ValidationError) as exc:
        return _reopen(session, " ".join(getattr(exc, "messages", [str(exc)])))
    except Exception as exc:  # the store went away, a network error: try again later
        logger.warning("commit of upload %s failed", session.pk, exc_info=True)
        return _reopen(session, f"The object store could not be reached ({exc}); commit again.")
    UploadSession.objects.filter(pk=session.pk).update(
        state=UploadState.COMMITTED, version=version, reserved_bytes=0, updated_at=timezone.now()
    )
    discard_staging(session, keep_state=True)
    session.refresh_from_db()
    return session


def _reopen(session: UploadSession, error: str) -> UploadSession:
    UploadSession.objects.filter(pk=session.pk).update(
        state=UploadState.OPEN, error=error[:2000], updated_at=timezone.now()
    )
    session.refresh_from_db()
    return session


class _ChainedParts(io.RawIOBase):
    """The parts of a file, read one after another, as one stream."""

    def __init__(self, names: list[str]):
        self.names = list(names)
        self.current = None

    def readable(self):
        return True

    def readinto(self, buffer):
        while True:
            if self.current is None:
                if not self.names:
                    return 0
                self.current = default_storage.open(self.names.pop(0), "rb")
            n = self.current.readinto(buffer)
            if n:
                return n
            self.current.close()
            self.current = None

    def close(self):
        if self.current is not None:
            self.current.close()
        super().close()


def _assemble(session: UploadSession, file: UploadFile) -> None:
    """Turn a file's parts into a blob: compute its sha256 from the bytes themselves."""
    if file.part_count == 0:
        storage.store_blob(EMPTY_SHA256, io.BytesIO(b""))
        blob, _ = Blob.objects.get_or_create(sha256=EMPTY_SHA256, defaults={"size": 0})
    elif session.backend == "filesystem":
        names = [f"{file.staging_key}/{n}" for n in range(1, file.part_count + 1)]
        with io.BufferedReader(_ChainedParts(names), storage.CHUNK) as fh:
            sha, size = storage.hash_stream(fh)
        if size != file.size:
            raise CommitProblem(f"{file.path}: expected {file.size} bytes, assembled {size}.")
        if not default_storage.exists(blob_key(sha)):
            with io.BufferedReader(_ChainedParts(names), storage.CHUNK) as fh:
                storage.store_blob(sha, fh)
        blob, _ = Blob.objects.get_or_create(sha256=sha, defaults={"size": size})
    else:
        blob = _assemble_s3(session, file)
    file.blob = blob
    file.save(update_fields=["blob"])


def _assemble_s3(session: UploadSession, file: UploadFile) -> Blob:
    import hashlib

    client, key = storage.s3_client(), storage.s3_key(file.staging_key)
    declared = dict(file.parts.values_list("number", "sha256"))
    if file.s3_upload_id:
        held = gateway_parts(file)
        if sorted(held) != list(range(1, file.part_count + 1)):
            forget_parts(file, abort=False)
            raise CommitProblem(f"{file.path}: the object store lost parts; upload it again.")
        client.complete_multipart_upload(
            Bucket=storage.bucket(),
            Key=key,
            UploadId=file.s3_upload_id,
            MultipartUpload={
                "Parts": [{"PartNumber": n, "ETag": held[n]["ETag"]} for n in sorted(held)]
            },
        )
        file.s3_upload_id = ""
        file.save(update_fields=["s3_upload_id"])
    # One pass over the object: the file's sha256 and every part's, against what was declared.
    whole = hashlib.sha256()
    body = client.get_object(Bucket=storage.bucket(), Key=key)["Body"]
    size = 0
    for number in range(1, file.part_count + 1):
        want = part_bounds(session, file, number)
        part = hashlib.sha256()
        got = 0
        while got < want:
            chunk = body.read(min(storage.CHUNK, want - got))
            if not chunk:
                break
            got += len(chunk)
            part.update(chunk)
            whole.update(chunk)
        size += got
        if got != want or part.hexdigest() != declared.get(number):
            body.close()
            forget_parts(file, abort=False)
            raise CommitProblem(
                f"{file.path} part {number}: checksum mismatch (damaged on the way); "
                "upload the file again."
            )
    body.close()
    if size != file.size:
        forget_parts(file, abort=False)
        raise CommitProblem(f"{file.path}: expected {file.size} bytes, the store has {size}.")
    sha = whole.hexdigest()
    storage.copy_to_blob(sha, file.staging_key)
    blob, _ = Blob.objects.get_or_create(sha256=sha, defaults={"size": size})
    client.delete_object(Bucket=storage.bucket(), Key=key)
    return blob
