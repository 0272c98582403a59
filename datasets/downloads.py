"""Sending dataset bytes to users: single files (a presigned GET on S3, streamed from
storage on the filesystem), previews, and whole versions as a streamed zip."""

from __future__ import annotations

import mimetypes
import zipfile

from django.core.files.storage import default_storage
from django.http import FileResponse, HttpResponseRedirect, StreamingHttpResponse

from datasets import storage
from datasets.models import DatasetFile, DatasetVersion, blob_key

PREVIEW_BYTES = 64 * 1024
PREVIEW_LINES = 50
IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
TEXT_SUFFIXES = {".txt", ".csv", ".tsv", ".json", ".jsonl", ".md", ".yaml", ".yml", ".xml", ".py"}


def file_response(file: DatasetFile, inline: bool = False):
    if storage.is_s3():
        return HttpResponseRedirect(
            storage.presigned_get(blob_key(file.blob_id), file.name, inline=inline)
        )
    content_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    response = FileResponse(
        default_storage.open(blob_key(file.blob_id), "rb"),
        as_attachment=not inline,
        filename=file.name,
        content_type=content_type,
    )
    # Uploaded content must never run as a page of this site.
    response["Content-Security-Policy"] = "default-src 'none'; img-src 'self'; sandbox"
    return response


def preview(file: DatasetFile) -> dict:
    """What the file page shows: an image, the head of a text/CSV file, or nothing."""
    content_type = mimetypes.guess_type(file.name)[0] or ""
    if content_type in IMAGE_TYPES:
        return {"kind": "image"}
    suffix = "." + file.name.rsplit(".", 1)[-1].lower() if "." in file.name else ""
    if suffix not in TEXT_SUFFIXES and not content_type.startswith("text/"):
        return {"kind": "none"}
    with default_storage.open(blob_key(file.blob_id), "rb") as fh:
        head = fh.read(PREVIEW_BYTES)
    if b"\x00" in head:
        return {"kind": "none"}
    lines = head.decode("utf-8", errors="replace").splitlines()[:PREVIEW_LINES]
    if suffix in (".csv", ".tsv"):
        import csv

        rows = list(csv.reader(lines, delimiter="\t" if suffix == ".tsv" else ","))
        return {"kind": "table", "rows": rows, "truncated": len(head) == PREVIEW_BYTES}
    return {"kind": "text", "text": "\n".join(lines), "truncated": len(head) == PREVIEW_BYTES}


class _Pipe:
    """A write-only file for zipfile whose written bytes are handed out as they come."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.offset = 0

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self.chunks)
        self.chunks = []
        return out


def _zip_stream(version: DatasetVersion):
    pipe = _Pipe()
    # Stored, not deflated: training data is mostly compressed already, and the CPU stays free.
    with zipfile.ZipFile(pipe, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        files = version.files.order_by("path").values_list("path", "blob_id", "size")
        for path, sha, size in files.iterator(chunk_size=2000):
            info = zipfile.ZipInfo(path)
            info.file_size = size
            with (
                default_storage.open(blob_key(sha), "rb") as src,
                zf.open(info, "w", force_zip64=size > 2**31) as dst,
            ):
                while chunk := src.read(storage.CHUNK):
                    dst.write(chunk)
                    yield pipe.take()
            yield pipe.take()
    yield pipe.take()


def version_zip(version: DatasetVersion) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_zip_stream(version), content_type="application/zip")
    name = f"{version.dataset.slug}-v{version.number}.zip"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
