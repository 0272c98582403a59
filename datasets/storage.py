"""What datasets need from the default storage beyond Django's storage API.

Django's API covers open/save/delete/exists; presigned URLs and multipart uploads
are S3-only, so they are reached through the boto3 client django-storages holds.
Everything else asks `is_s3()` once and takes one of two paths.
"""

from __future__ import annotations

import hashlib
import threading

from django.core.files import File
from django.core.files.storage import default_storage

from datasets.models import blob_key

CHUNK = 1024 * 1024
PRESIGN_SECONDS = 6 * 3600


def is_s3() -> bool:
    return hasattr(default_storage, "bucket_name")


def backend_name() -> str:
    return "s3" if is_s3() else "filesystem"


_clients: dict[tuple, object] = {}
_clients_lock = threading.Lock()


def s3_client():
    """One boto3 client per configuration, shared by all threads (clients are thread-safe).

    django-storages builds a new session per thread, and the threaded web server starts a
    thread per request: loading botocore's service model each time cost ~0.1 s of CPU
    per request, which dominated the web server's CPU per uploaded GB.
    """
    s = default_storage
    key = (s.endpoint_url, s.access_key, s.secret_key, s.region_name, s.addressing_style)
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                import boto3
                from botocore.config import Config

                client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=s.endpoint_url,
                    aws_access_key_id=s.access_key,
                    aws_secret_access_key=s.secret_key,
                    region_name=s.region_name,
                    config=Config(
                        signature_version=s.signature_version or "s3v4",
                        s3={"addressing_style": s.addressing_style or "path"},
                    ),
                )
                _clients[key] = client
    return client


def bucket() -> str:
    return default_storage.bucket_name


def s3_key(name: str) -> str:
    # django-storages may be configured with a location prefix.
    return default_storage._normalize_name(name)


def presigned_get(name: str, filename: str | None = None, inline: bool = False) -> str:
    params = {"Bucket": bucket(), "Key": s3_key(name)}
    if filename:
        disposition = "inline" if inline else "attachment"
        params["ResponseContentDisposition"] = f'{disposition}; filename="{_quote(filename)}"'
    return s3_client().generate_presigned_url(
        "get_object", Params=params, ExpiresIn=PRESIGN_SECONDS
    )


def presigned_part(name: str, upload_id: str, number: int) -> str:
    return s3_client().generate_presigned_url(
        "upload_part",
        Params={
            "Bucket": bucket(),
            "Key": s3_key(name),
            "UploadId": upload_id,
            "PartNumber": number,
        },
        ExpiresIn=PRESIGN_SECONDS,
    )


def _quote(name: str) -> str:
    return "".join(c if c.isprintable() and c not in '"\\' else "_" for c in name)


def store_blob(sha256: str, fileobj) -> None:
    """Put content under its blob key unless it is there already (content-addressed: equal
    keys mean equal bytes, so a concurrent writer of the same key is harmless)."""
    key = blob_key(sha256)
    if default_storage.exists(key):
        return
    saved = default_storage.save(key, File(fileobj, name=key))
    if saved != key:  # lost a race to another writer of the same content
        default_storage.delete(saved)


def copy_to_blob(sha256: str, source_name: str) -> None:
    """Server-side copy on S3 (the bytes stay in the gateway); a stream on the filesystem."""
    key = blob_key(sha256)
    if default_storage.exists(key):
        return
    if is_s3():
        s3_client().copy({"Bucket": bucket(), "Key": s3_key(source_name)}, bucket(), s3_key(key))
    else:
        with default_storage.open(source_name, "rb") as fh:
            store_blob(sha256, fh)


def hash_stream(fh) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := fh.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def delete_prefix(prefix: str) -> None:
    """Delete everything under `prefix` (a staging folder)."""
    if is_s3():
        client = s3_client()
        paginator = client.get_paginator("list_objects_v2")
        prefix = s3_key(prefix).rstrip("/") + "/" if prefix else ""
        for page in paginator.paginate(Bucket=bucket(), Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket(), Delete={"Objects": keys, "Quiet": True})
        return
    import shutil
    from pathlib import Path

    shutil.rmtree(Path(default_storage.path(prefix)), ignore_errors=True)


def configure_bucket(origins: list[str]) -> None:
    """Create the bucket if needed and let browsers on `origins` PUT parts to it (CORS),
    reading the ETag header back. `manage.py dataset_bucket` calls this."""
    client = s3_client()
    try:
        client.head_bucket(Bucket=bucket())
    except Exception:
        client.create_bucket(Bucket=bucket())
    client.put_bucket_cors(
        Bucket=bucket(),
        CORSConfiguration={
            "CORSRules": [
                {
                    "AllowedOrigins": origins,
                    "AllowedMethods": ["PUT", "GET", "HEAD"],
                    "AllowedHeaders": ["*"],
                    "ExposeHeaders": ["ETag"],
                    "MaxAgeSeconds": 3600,
                }
            ]
        },
    )
