"""The parts of an upload while they wait in storage: the size each must have, what the
gateway holds, and dropping them (one file's, or a whole session's)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils import timezone

from datasets import storage
from datasets.models import UploadFile, UploadPart, UploadSession, UploadState


def part_bounds(session: UploadSession, file: UploadFile, number: int) -> int:
    """The exact size part `number` of `file` must have."""
    if (
        isinstance(number, bool)
        or not isinstance(number, int)
        or not (1 <= number <= file.part_count)
    ):
        raise ValidationError(f"{file.path}: part must be 1 to {file.part_count}, not {number!r}.")
    if number < file.part_count:
        return session.part_size
    return file.size - session.part_size * (file.part_count - 1)


def gateway_parts(file: UploadFile) -> dict[int, dict]:
    client = storage.s3_client()
    held: dict[int, dict] = {}
    marker = 0
    while True:
        page = client.list_parts(
            Bucket=storage.bucket(),
            Key=storage.s3_key(file.staging_key),
            UploadId=file.s3_upload_id,
            PartNumberMarker=marker,
        )
        for p in page.get("Parts", []):
            held[p["PartNumber"]] = p
        if not page.get("IsTruncated"):
            return held
        marker = page["NextPartNumberMarker"]


def forget_parts(file: UploadFile, abort: bool = True) -> None:
    """Drop what arrived of one file so it is uploaded again from scratch."""
    if file.s3_upload_id and abort:
        abort_multipart(file)
    if storage.is_s3():
        storage.s3_client().delete_object(
            Bucket=storage.bucket(), Key=storage.s3_key(file.staging_key)
        )
    file.parts.all().delete()
    file.s3_upload_id = ""
    file.save(update_fields=["s3_upload_id"])


def abort_multipart(file: UploadFile) -> None:
    try:
        storage.s3_client().abort_multipart_upload(
            Bucket=storage.bucket(),
            Key=storage.s3_key(file.staging_key),
            UploadId=file.s3_upload_id,
        )
    except Exception as exc:
        if "NoSuchUpload" not in str(exc):
            raise


def discard_staging(session: UploadSession, keep_state: bool = False) -> None:
    """Abort multipart uploads and delete staged parts (raises if the store is down, so
    the cleanup task tries again later)."""
    if session.backend == "s3":
        for file in session.files.exclude(s3_upload_id=""):
            abort_multipart(file)
    storage.delete_prefix(session.staging_prefix)
    UploadPart.objects.filter(file__session=session).delete()
    if not keep_state:
        UploadSession.objects.filter(pk=session.pk).update(
            state=UploadState.ABORTED, reserved_bytes=0, updated_at=timezone.now()
        )
