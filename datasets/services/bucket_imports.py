"""A copy of the objects under an allowed bucket prefix as a new version."""

from __future__ import annotations

import unicodedata
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.db import transaction

from core import audit
from datasets import storage
from datasets.models import Blob, BucketImport, Dataset, UploadState, VersionSource, blob_key
from datasets.services.archives import ArchiveRefused
from datasets.services.paths import MAX_UPLOAD_FILES, check_tree, clean_path
from datasets.services.quotas import check_quota
from datasets.services.versions import create_version, parent_for
from projects.permissions import require

# Importing reads objects that never went through Gantry's upload checks, from a bucket
# shared by every tenant: a maintainer-level power, the same rank that may change the
# project itself, and bounded site-wide by GANTRY_DATASET_IMPORT_PREFIXES.
BUCKET_IMPORT_ACTION = "project.change"
PROGRESS_EVERY = 2.0  # seconds between progress writes while a large object streams


def import_prefixes() -> list[str]:
    raw = settings.GANTRY_DATASET_IMPORT_PREFIXES or ""
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    return [p.strip().strip("/") + "/" for p in items if p.strip().strip("/")]


def _clean_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str) or not prefix.strip("/ "):
        raise ValidationError({"prefix": "Give the bucket prefix (a folder) to import."})
    if any(unicodedata.category(c) == "Cc" for c in prefix):
        raise ValidationError({"prefix": "The prefix holds control characters."})
    parts = prefix.strip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValidationError({"prefix": "The prefix may not hold empty, '.' or '..' parts."})
    if len(prefix) > 1000:
        raise ValidationError({"prefix": "The prefix is too long."})
    return "/".join(parts) + "/"


def start_bucket_import(actor, dataset: Dataset, prefix, parent="latest") -> BucketImport:
    """Queue the task that turns the objects under `prefix` into a new version."""
    require(actor, BUCKET_IMPORT_ACTION, dataset)
    allowed = import_prefixes()
    if not allowed:
        raise ValidationError(
            {
                "prefix": "Importing from a bucket prefix is turned off on this site "
                "(an administrator sets GANTRY_DATASET_IMPORT_PREFIXES to allow it)."
            }
        )
    if not storage.is_s3():
        raise ValidationError({"prefix": "Importing from a bucket prefix needs S3 storage."})
    prefix = _clean_prefix(prefix)
    if not any(prefix.startswith(a) for a in allowed):
        raise ValidationError(
            {"prefix": f"{prefix!r} is outside the allowed prefixes: {', '.join(allowed)}."}
        )
    parent = parent_for(dataset, parent)
    with transaction.atomic():
        imp = BucketImport.objects.create(
            dataset=dataset, parent=parent, prefix=prefix, created_by=actor
        )
        audit.record(actor, "dataset.bucket_import", imp, tenant=dataset.tenant, prefix=prefix)
        from datasets.tasks import enqueue

        transaction.on_commit(lambda: enqueue("datasets.tasks.import_bucket_prefix", imp.pk))
    return imp


def _list_prefix(prefix: str) -> list[tuple[str, str, int]]:
    """(relative path, key, size) of every object under `prefix`, checked."""
    client = storage.s3_client()
    found: list[tuple[str, str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=storage.bucket(), Prefix=prefix
    ):
        for obj in page.get("Contents", []):
            key, size = obj["Key"], int(obj["Size"])
            rel = key[len(prefix) :]
            if rel.endswith("/") and size == 0:
                continue  # a "folder" marker
            try:
                rel = clean_path(rel)
            except ValidationError as exc:
                raise ArchiveRefused(f"{key!r}: {' '.join(exc.messages)}") from None
            found.append((rel, key, size))
            if len(found) > MAX_UPLOAD_FILES:
                raise ArchiveRefused(f"More than {MAX_UPLOAD_FILES} objects under the prefix.")
    if not found:
        raise ArchiveRefused("No objects under the prefix.")
    check_tree(rel for rel, _, _ in found)
    return found


def import_bucket_prefix(import_id: int) -> BucketImport:
    """The body of the bucket import task: stream each object once for its sha256, copy
    it server-side to its blob key unless that blob is stored already, then commit."""
    import hashlib
    import time

    from botocore.exceptions import BotoCoreError, ClientError

    imp = BucketImport.objects.select_related("dataset__project__tenant").get(pk=import_id)
    if imp.state != UploadState.OPEN:
        return imp
    progress = BucketImport.objects.filter(pk=imp.pk)
    client = storage.s3_client()
    bucket = storage.bucket()
    blobs: dict[str, Blob] = {}
    try:
        found = _list_prefix(imp.prefix)
        total = sum(size for _, _, size in found)
        progress.update(files_total=len(found), bytes_total=total)
        check_quota(imp.dataset.project.tenant, total)
        done = copied = 0
        for n, (rel, key, listed) in enumerate(found, 1):
            obj = client.get_object(Bucket=bucket, Key=key)
            etag = obj["ETag"]
            digest = hashlib.sha256()
            size = 0
            last = time.monotonic()
            with obj["Body"] as body:
                while chunk := body.read(storage.CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    if time.monotonic() - last > PROGRESS_EVERY:
                        progress.update(bytes_done=done + size)
                        last = time.monotonic()
            sha = digest.hexdigest()
            name = blob_key(sha)
            if not default_storage.exists(name):
                # The bytes stay in the gateway; IfMatch refuses an object that changed
                # since it was hashed.
                client.copy(
                    {"Bucket": bucket, "Key": key},
                    bucket,
                    storage.s3_key(name),
                    ExtraArgs={"CopySourceIfMatch": etag},
                )
                copied += size
            blobs[rel], _ = Blob.objects.get_or_create(sha256=sha, defaults={"size": size})
            done += size
            progress.update(files_done=n, bytes_done=done, bytes_copied=copied)
            if size != listed:
                raise ArchiveRefused(f"{key!r} changed while it was imported.")
        version = create_version(
            imp.created_by,
            imp.dataset,
            parent=imp.parent,
            new_files=blobs,
            source=VersionSource.BUCKET,
            source_detail={"bucket": bucket, "prefix": imp.prefix, "import": imp.pk},
            message=f"copy of s3://{bucket}/{imp.prefix}",
        )
    except (ArchiveRefused, ValidationError, BotoCoreError, ClientError) as exc:
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            message = f"the object store answered {code or exc}"
            if code in ("PreconditionFailed", "412"):
                message = "an object changed while it was imported; start the import again"
        else:
            message = " ".join(getattr(exc, "messages", [str(exc)]))
        progress.update(state=UploadState.FAILED, error=f"{imp.prefix}: {message}"[:2000])
        imp.refresh_from_db()
        return imp
    progress.update(state=UploadState.COMMITTED, version=version)
    imp.refresh_from_db()
    return imp
