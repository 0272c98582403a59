"""State changes for datasets: create, upload (start, parts, commit, abort), archives,
job outputs, job inputs, quotas and cleanup. Views, the API, the CLI's endpoints and
the tasks call these; none writes a dataset model directly.

A version is only ever created by `_create_version`, in one transaction with all of
its files, after every blob it names is in storage: there is no half-committed version.
"""

from __future__ import annotations

import io
import logging
import math
import posixpath
import re
import stat
import tarfile
import tempfile
import unicodedata
import uuid
import zipfile
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone
from django.utils.text import slugify

from core import audit
from core.names import check_segments, normal_name
from datasets import job_outputs, storage
from datasets.models import (
    ArchiveImport,
    Blob,
    BucketImport,
    Dataset,
    DatasetFile,
    DatasetVersion,
    StorageQuota,
    UploadFile,
    UploadPart,
    UploadSession,
    UploadState,
    VersionSource,
    blob_key,
)
from projects.permissions import can, require

logger = logging.getLogger(__name__)

MAX_PATH = 1024
MAX_NAME = 255
MAX_UPLOAD_FILES = 100_000
MAX_PARTS = 10_000  # the S3 limit
SHA256 = re.compile(r"^[0-9a-f]{64}$")
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
BATCH = 5000
LIVE = (UploadState.OPEN, UploadState.COMMITTING)


class CommitProblem(Exception):
    """A commit cannot finish as things stand; the message says what to do."""


# --- names and quotas -----------------------------------------------------------------


def clean_path(path: Any) -> str:
    """A safe relative file path in NFKC (core.names), or ValidationError saying what is
    wrong with it."""
    if not isinstance(path, str) or not path:
        raise ValidationError("A file path is required.")
    given, path = path, normal_name(path)
    shown = repr(given[:100]) + ("" if path == given else f" (read as {path[:100]!r})")
    if "\x00" in path or any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in path):
        raise ValidationError(f"{shown}: file names may not contain control characters.")
    if "\\" in path:
        raise ValidationError(f"{shown}: use / to separate folders, not \\.")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise ValidationError(f"{shown}: absolute paths are not allowed.")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValidationError(f"{shown}: empty, . and .. path segments are not allowed.")
    if len(path.encode()) > MAX_PATH or any(len(p.encode()) > MAX_NAME for p in parts):
        raise ValidationError(f"{shown}: too long (at most {MAX_PATH} bytes, {MAX_NAME} per name).")
    if parts[0] == ".gantry":
        raise ValidationError(f"{shown}: .gantry is reserved.")
    check_segments(path, shown)
    return path


def _check_tree(paths: Iterable[str]) -> None:
    """No path may be both a file and a folder (they could not be staged side by side)."""
    files = set(paths)
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in files:
                raise ValidationError(f"“{folder}” is both a file and a folder.")


def tenant_quota(tenant) -> int:
    row = StorageQuota.objects.filter(tenant=tenant).first()
    if row is not None:
        return row.bytes
    return int(settings.GANTRY_TENANT_STORAGE_QUOTA_GB * 1024**3)


def tenant_usage(tenant) -> int:
    """Bytes a tenant holds: its distinct blobs, plus what open uploads have reserved."""
    blobs = DatasetFile.objects.filter(version__dataset__project__tenant=tenant).values("blob")
    stored = Blob.objects.filter(sha256__in=blobs).aggregate(n=Sum("size"))["n"] or 0
    reserved = (
        UploadSession.objects.filter(dataset__project__tenant=tenant, state__in=LIVE).aggregate(
            n=Sum("reserved_bytes")
        )["n"]
        or 0
    )
    return stored + reserved


def _check_quota(tenant, more: int) -> None:
    quota, used = tenant_quota(tenant), tenant_usage(tenant)
    if used + more > quota:
        raise ValidationError(
            f"This needs {_human(more)} but the tenant has {_human(max(quota - used, 0))} "
            f"of its {_human(quota)} dataset storage left."
        )


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


# --- datasets -----------------------------------------------------------------------------


def _clean_tags(tags) -> list[str]:
    if tags in (None, ""):
        return []
    if isinstance(tags, str):
        tags = [t for t in (s.strip() for s in tags.split(",")) if t]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValidationError({"tags": "Tags are a list of words."})
    if len(tags) > 50 or any(len(t) > 50 or not t.strip() for t in tags):
        raise ValidationError({"tags": "At most 50 tags of at most 50 characters."})
    return sorted({t.strip() for t in tags})


@transaction.atomic
def create_dataset(
    actor, project, *, name: str, slug: str = "", description: str = "", tags=None, licence=""
) -> Dataset:
    require(actor, "dataset.create", project)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "A name is required."})
    slug = slug or slugify(name)[:50]
    if not slug or not re.fullmatch(r"[-a-zA-Z0-9_]+", slug):
        raise ValidationError({"slug": "Letters, digits, - and _ only."})
    if Dataset.objects.filter(project=project, slug=slug).exists():
        raise ValidationError({"slug": f"The project already has a dataset “{slug}”."})
    dataset = Dataset.objects.create(
        project=project,
        name=name,
        slug=slug,
        description=description or "",
        tags=_clean_tags(tags),
        licence=(licence or "").strip(),
        created_by=actor,
    )
    audit.record(actor, "dataset.create", dataset, tenant=project.tenant, project=project.pk)
    return dataset


@transaction.atomic
def update_dataset(actor, dataset: Dataset, **fields) -> Dataset:
    require(actor, "dataset.create", dataset)
    for name in ("name", "description", "licence"):
        if name in fields:
            setattr(dataset, name, (fields[name] or "").strip())
    if "tags" in fields:
        dataset.tags = _clean_tags(fields["tags"])
    if not dataset.name:
        raise ValidationError({"name": "A name is required."})
    dataset.save()
    audit.record(actor, "dataset.change", dataset, tenant=dataset.project.tenant)
    return dataset


def delete_dataset(actor, dataset: Dataset) -> None:
    """Delete a dataset with its versions; uploads in flight are aborted, blobs no other
    version holds go with the next garbage collection."""
    require(actor, "dataset.delete", dataset)
    for session in dataset.uploads.filter(state__in=(*LIVE, UploadState.FAILED)):
        _discard_staging(session)
    with transaction.atomic():
        tenant = dataset.project.tenant
        audit.record(actor, "dataset.delete", dataset, tenant=tenant, slug=dataset.slug)
        dataset.delete()


# --- versions ---------------------------------------------------------------------------


def _create_version(
    actor,
    dataset: Dataset,
    *,
    parent: DatasetVersion | None,
    new_files: dict[str, Blob],
    remove: Iterable[str] = (),
    source: str,
    source_detail: dict | None = None,
    message: str = "",
) -> DatasetVersion:
    """The one place a version is born: parent's files − removed, + new, in one transaction."""
    remove = set(remove)
    with transaction.atomic():
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        number = (dataset.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = DatasetVersion.objects.create(
            dataset=dataset,
            number=number,
            parent=parent,
            source=source,
            source_detail=source_detail or {},
            message=message[:500],
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        count = total = 0
        paths: list[str] = list(new_files)
        if parent is not None:
            inherited = (
                parent.files.exclude(path__in=remove)
                .exclude(path__in=list(new_files))
                .values_list("path", "blob_id", "size")
                .order_by("path")
            )
            batch = []
            for path, sha, size in inherited.iterator(chunk_size=BATCH):
                paths.append(path)
                batch.append(DatasetFile(version=version, path=path, blob_id=sha, size=size))
                count, total = count + 1, total + size
                if len(batch) >= BATCH:
                    DatasetFile.objects.bulk_create(batch)
                    batch = []
            DatasetFile.objects.bulk_create(batch)
        _check_tree(paths)
        rows = [
            DatasetFile(version=version, path=path, blob=blob, size=blob.size)
            for path, blob in new_files.items()
        ]
        for i in range(0, len(rows), BATCH):
            DatasetFile.objects.bulk_create(rows[i : i + BATCH])
        count += len(rows)
        total += sum(b.size for b in new_files.values())
        version.file_count, version.total_size = count, total
        version.save(update_fields=["file_count", "total_size"])
        audit.record(
            actor,
            "dataset.version",
            version,
            tenant=dataset.project.tenant,
            number=number,
            source=source,
            files=count,
            bytes=total,
        )
    return version


def _parent_for(dataset: Dataset, parent) -> DatasetVersion | None:
    if parent in (None, "", "none"):
        return None
    if parent == "latest":
        return dataset.latest_version()
    if isinstance(parent, DatasetVersion):
        version = parent
    else:
        try:
            version = dataset.versions.filter(pk=int(parent)).first()
        except (TypeError, ValueError):
            version = None
    if version is None or version.dataset_id != dataset.pk:
        raise ValidationError({"parent": "The parent must be a version of this dataset."})
    return version


def copy_version(actor, source: DatasetVersion, dataset: Dataset, message: str = ""):
    """A new version of `dataset` holding exactly the files of `source` (no bytes move)."""
    require(actor, "dataset.view", source)
    require(actor, "dataset.create", dataset)
    if source.tenant.pk != dataset.tenant.pk:
        raise ValidationError("Versions can only be copied within a tenant.")
    return _create_version(
        actor,
        dataset,
        parent=source,
        new_files={},
        source=VersionSource.COPY,
        source_detail={"version": source.pk, "dataset": source.dataset_id},
        message=message or f"copy of {source}",
    )


# --- uploads ----------------------------------------------------------------------------


def _part_size(sizes: list[int]) -> int:
    base = settings.GANTRY_UPLOAD_PART_MB * 1024 * 1024
    largest = max(sizes, default=0)
    need = math.ceil(largest / MAX_PARTS) if largest else 0
    mib = 1024 * 1024
    return max(base, math.ceil(need / mib) * mib)


def start_upload(
    actor, dataset: Dataset, *, files: list, parent="latest", remove=(), message: str = ""
) -> UploadSession:
    """Open an upload: the files to add (path, size and, optionally, sha256) on top of
    `parent` (default: the latest version), and paths of the parent to drop.

    A file whose sha256 is already held by a version in the same tenant is linked
    without uploading it (never across tenants: that would tell who holds what).
    The quota is checked here, before a byte moves, and the bytes are reserved.
    """
    require(actor, "dataset.create", dataset)
    parent = _parent_for(dataset, parent)
    if not isinstance(files, list) or not isinstance(remove, list | tuple):
        raise ValidationError("files and remove are lists.")
    if not files and not remove:
        raise ValidationError({"files": "Add at least one file (or remove one)."})
    if len(files) > MAX_UPLOAD_FILES:
        raise ValidationError({"files": f"At most {MAX_UPLOAD_FILES} files per upload."})
    cleaned: dict[str, tuple[int, str | None]] = {}
    for entry in files:
        if not isinstance(entry, dict):
            raise ValidationError({"files": "Each file is an object with path and size."})
        try:
            path = clean_path(entry.get("path"))
        except ValidationError as exc:
            raise ValidationError({"files": exc.messages}) from None
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValidationError({"files": f"{path!r}: size must be a whole number of bytes."})
        sha = entry.get("sha256") or None
        if sha is not None and (not isinstance(sha, str) or not SHA256.match(sha.lower())):
            raise ValidationError({"files": f"{path!r}: sha256 must be 64 hex digits."})
        if path in cleaned:
            raise ValidationError({"files": f"{path!r} is listed twice."})
        cleaned[path] = (size, sha.lower() if sha else None)
    remove = [clean_path(p) for p in remove]
    if parent is None and remove:
        raise ValidationError({"remove": "There is no parent version to remove files from."})
    _check_tree(cleaned)

    tenant = dataset.project.tenant
    wanted = {sha for _, sha in cleaned.values() if sha}
    known = dict(
        Blob.objects.filter(
            sha256__in=DatasetFile.objects.filter(
                version__dataset__project__tenant=tenant, blob_id__in=wanted
            ).values("blob")
        ).values_list("sha256", "size")
    )
    linked = {p for p, (size, sha) in cleaned.items() if sha in known and known[sha] == size}
    to_send = [size for p, (size, _) in cleaned.items() if p not in linked]
    reserve = sum(to_send)
    part_size = _part_size(to_send)
    with transaction.atomic():
        # One upload starting at a time per tenant, so two cannot both take the last bytes.
        type(tenant).objects.select_for_update().filter(pk=tenant.pk).first()
        _check_quota(tenant, reserve)
        session = UploadSession.objects.create(
            dataset=dataset,
            parent=parent,
            remove_paths=remove,
            message=(message or "")[:500],
            backend=storage.backend_name(),
            part_size=part_size,
            reserved_bytes=reserve,
            created_by=actor,
        )
        UploadFile.objects.bulk_create(
            [
                UploadFile(
                    session=session,
                    path=path,
                    size=size,
                    part_count=0 if path in linked else math.ceil(size / part_size),
                    blob_id=sha if path in linked else None,
                )
                for path, (size, sha) in cleaned.items()
            ],
            batch_size=BATCH,
        )
        audit.record(
            actor, "dataset.upload", session, tenant=tenant, files=len(cleaned), bytes=reserve
        )
    return session


def _open_session(actor, session: UploadSession) -> UploadSession:
    require(actor, "dataset.create", session)
    if session.state != UploadState.OPEN:
        raise ValidationError(f"This upload is {session.get_state_display().lower()}.")
    return session


def _touch(session: UploadSession) -> None:
    UploadSession.objects.filter(pk=session.pk).update(updated_at=timezone.now())


def _part_bounds(session: UploadSession, file: UploadFile, number: int) -> int:
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


def upload_status(session: UploadSession) -> dict:
    """Which parts of which files have arrived: the page and the CLI resume from this."""
    parts: dict[int, list[int]] = {}
    for file_id, number in UploadPart.objects.filter(file__session=session).values_list(
        "file_id", "number"
    ):
        parts.setdefault(file_id, []).append(number)
    files = []
    for f in session.files.all().order_by("path"):
        have = sorted(parts.get(f.pk, []))
        files.append(
            {
                "id": f.pk,
                "path": f.path,
                "size": f.size,
                "part_count": f.part_count,
                "parts": have,
                "complete": f.blob_id is not None or len(have) == f.part_count,
            }
        )
    return {
        "id": session.pk,
        "dataset": session.dataset_id,
        "state": session.state,
        "error": session.error,
        "backend": session.backend,
        "part_size": session.part_size,
        "version": session.version_id,
        "files": files,
    }


def receive_part(
    actor, session: UploadSession, file: UploadFile, number: int, stream, sha256: str
) -> UploadPart:
    """Filesystem backend: store one part, checking its size and sha256 on arrival."""
    _open_session(actor, session)
    if session.backend != "filesystem":
        raise ValidationError("This upload goes straight to object storage: ask for part URLs.")
    expected = _part_bounds(session, file, number)
    sha256 = (sha256 or "").lower()
    if not SHA256.match(sha256):
        raise ValidationError("Send the part's sha256 (64 hex digits) in X-Part-Sha256.")
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as tmp:
        digest_size = _copy_hashing(stream, tmp, limit=expected)
        digest, size = digest_size
        if size != expected:
            raise ValidationError(
                f"{file.path} part {number}: expected {expected} bytes, got {size}."
            )
        if digest != sha256:
            raise ValidationError(
                f"{file.path} part {number}: checksum mismatch (the part was damaged on the way); "
                "send it again."
            )
        name = f"{file.staging_key}/{number}"
        if default_storage.exists(name):
            default_storage.delete(name)
        tmp.seek(0)
        default_storage.save(name, File(tmp, name=name))
    part, _ = UploadPart.objects.update_or_create(
        file=file, number=number, defaults={"size": size, "sha256": sha256, "etag": ""}
    )
    _touch(session)
    return part


def _copy_hashing(stream, out, limit: int) -> tuple[str, int]:
    import hashlib

    digest = hashlib.sha256()
    size = 0
    while chunk := stream.read(storage.CHUNK):
        size += len(chunk)
        if size > limit:
            return "", size
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest(), size


def sign_parts(actor, session: UploadSession, file: UploadFile, numbers: list) -> dict[int, str]:
    """S3 backend: presigned PUT URLs for parts of one file (the browser sends the bytes
    straight to the gateway). Starts the file's multipart upload on first use."""
    _open_session(actor, session)
    if session.backend != "s3":
        raise ValidationError("This upload goes through Gantry: PUT the parts to the part URL.")
    if not isinstance(numbers, list) or not numbers or len(numbers) > 1000:
        raise ValidationError("Ask for 1 to 1000 part numbers at a time.")
    for n in numbers:
        _part_bounds(session, file, n)
    with transaction.atomic():
        file = UploadFile.objects.select_for_update().get(pk=file.pk)
        if not file.s3_upload_id:
            created = storage.s3_client().create_multipart_upload(
                Bucket=storage.bucket(), Key=storage.s3_key(file.staging_key)
            )
            file.s3_upload_id = created["UploadId"]
            file.save(update_fields=["s3_upload_id"])
    _touch(session)
    return {n: storage.presigned_part(file.staging_key, file.s3_upload_id, n) for n in numbers}


def record_part(
    actor, session: UploadSession, file: UploadFile, number: int, sha256: str, etag: str
) -> UploadPart:
    """S3 backend: the client says a part arrived. The gateway is asked (ListParts) so the
    record is never ahead of what it holds; the sha256 is checked at commit."""
    _open_session(actor, session)
    if session.backend != "s3" or not file.s3_upload_id:
        raise ValidationError("Ask for the part's URL first.")
    expected = _part_bounds(session, file, number)
    sha256 = (sha256 or "").lower()
    if not SHA256.match(sha256):
        raise ValidationError("sha256 must be 64 hex digits.")
    held = _gateway_parts(file).get(number)
    if held is None:
        raise ValidationError(f"{file.path} part {number} has not reached the object store.")
    if held["Size"] != expected:
        raise ValidationError(
            f"{file.path} part {number}: expected {expected} bytes, the store has {held['Size']}."
        )
    if etag and etag.strip('"') != held["ETag"].strip('"'):
        raise ValidationError(f"{file.path} part {number}: the store holds a different part.")
    part, _ = UploadPart.objects.update_or_create(
        file=file,
        number=number,
        defaults={"size": expected, "sha256": sha256, "etag": held["ETag"]},
    )
    _touch(session)
    return part


def _gateway_parts(file: UploadFile) -> dict[int, dict]:
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


def commit_upload(actor, session: UploadSession) -> UploadSession:
    """Check that every part of every file arrived, then hand the commit to a task.

    The task (`finish_commit`) reads each file once to compute its sha256 — on S3 in
    the worker, not the web server — and creates the version in one transaction.
    """
    with transaction.atomic():
        session = UploadSession.objects.select_for_update().get(pk=session.pk)
        _open_session(actor, session)
        missing = []
        counts = dict(
            UploadPart.objects.filter(file__session=session)
            .values("file_id")
            .annotate(n=Count("id"))
            .values_list("file_id", "n")
        )
        for f in session.files.filter(blob__isnull=True).only("path", "part_count"):
            have = counts.get(f.pk, 0)
            if have < f.part_count:
                missing.append(f"{f.path} ({f.part_count - have} of {f.part_count} parts)")
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise ValidationError(f"Not everything has arrived: {', '.join(missing[:5])}{more}.")
        session.state = UploadState.COMMITTING
        session.error = ""
        session.updated_at = timezone.now()
        session.save(update_fields=["state", "error", "updated_at"])
        audit.record(actor, "dataset.commit", session, tenant=session.tenant)
        from datasets.tasks import enqueue

        transaction.on_commit(lambda: enqueue("datasets.tasks.commit_upload", session.pk))
    return session


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
        version = _create_version(
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
    _discard_staging(session, keep_state=True)
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
        held = _gateway_parts(file)
        if sorted(held) != list(range(1, file.part_count + 1)):
            _forget_parts(file, abort=False)
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
        want = _part_bounds(session, file, number)
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
            _forget_parts(file, abort=False)
            raise CommitProblem(
                f"{file.path} part {number}: checksum mismatch (damaged on the way); "
                "upload the file again."
            )
    body.close()
    if size != file.size:
        _forget_parts(file, abort=False)
        raise CommitProblem(f"{file.path}: expected {file.size} bytes, the store has {size}.")
    sha = whole.hexdigest()
    storage.copy_to_blob(sha, file.staging_key)
    blob, _ = Blob.objects.get_or_create(sha256=sha, defaults={"size": size})
    client.delete_object(Bucket=storage.bucket(), Key=key)
    return blob


def _forget_parts(file: UploadFile, abort: bool = True) -> None:
    """Drop what arrived of one file so it is uploaded again from scratch."""
    if file.s3_upload_id and abort:
        _abort_multipart(file)
    if storage.is_s3():
        storage.s3_client().delete_object(
            Bucket=storage.bucket(), Key=storage.s3_key(file.staging_key)
        )
    file.parts.all().delete()
    file.s3_upload_id = ""
    file.save(update_fields=["s3_upload_id"])


def _abort_multipart(file: UploadFile) -> None:
    try:
        storage.s3_client().abort_multipart_upload(
            Bucket=storage.bucket(),
            Key=storage.s3_key(file.staging_key),
            UploadId=file.s3_upload_id,
        )
    except Exception as exc:
        if "NoSuchUpload" not in str(exc):
            raise


def _discard_staging(session: UploadSession, keep_state: bool = False) -> None:
    """Abort multipart uploads and delete staged parts (raises if the store is down, so
    the cleanup task tries again later)."""
    if session.backend == "s3":
        for file in session.files.exclude(s3_upload_id=""):
            _abort_multipart(file)
    storage.delete_prefix(session.staging_prefix)
    UploadPart.objects.filter(file__session=session).delete()
    if not keep_state:
        UploadSession.objects.filter(pk=session.pk).update(
            state=UploadState.ABORTED, reserved_bytes=0, updated_at=timezone.now()
        )


def abort_upload(actor, session: UploadSession) -> UploadSession:
    require(actor, "dataset.create", session)
    if session.state not in (UploadState.OPEN, UploadState.FAILED):
        raise ValidationError(f"This upload is {session.get_state_display().lower()}.")
    _discard_staging(session)
    audit.record(actor, "dataset.upload_abort", session, tenant=session.tenant)
    session.refresh_from_db()
    return session


def cleanup_abandoned_uploads(now=None) -> int:
    """Abort uploads untouched for GANTRY_UPLOAD_EXPIRY_HOURS (and stuck commits)."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.GANTRY_UPLOAD_EXPIRY_HOURS)
    stale = UploadSession.objects.filter(
        Q(state__in=(UploadState.OPEN, UploadState.FAILED, UploadState.COMMITTING)),
        updated_at__lt=cutoff,
    )
    done = 0
    for session in stale:
        try:
            _discard_staging(session)
        except Exception:
            logger.warning("could not clean up upload %s; will retry", session.pk, exc_info=True)
            continue
        audit.record(None, "dataset.upload_expire", session, tenant=session.tenant)
        done += 1
    # Archives whose task never ran.
    for archive in ArchiveImport.objects.filter(state=UploadState.OPEN, created_at__lt=cutoff):
        default_storage.delete(archive.staging_key)
        ArchiveImport.objects.filter(pk=archive.pk).update(
            state=UploadState.ABORTED, error="expired"
        )
    return done


def collect_garbage(grace: timedelta = timedelta(hours=1), now=None) -> int:
    """Delete blobs nothing refers to any more (older than `grace`, so a commit that is
    storing blobs right now keeps them)."""
    now = now or timezone.now()
    candidates = Blob.objects.filter(created_at__lt=now - grace, files__isnull=True).exclude(
        sha256__in=UploadFile.objects.exclude(blob=None).values("blob")
    )
    removed = 0
    for sha in list(candidates.values_list("sha256", flat=True)[:10_000]):
        with transaction.atomic():
            deleted, _ = Blob.objects.filter(pk=sha, files__isnull=True).delete()
        if deleted:
            default_storage.delete(blob_key(sha))
            removed += 1
    return removed


# --- archives ---------------------------------------------------------------------------

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")


def start_archive_import(actor, dataset: Dataset, upload, parent="latest") -> ArchiveImport:
    """Keep an uploaded zip / tar / tar.gz and queue the task that unpacks it."""
    require(actor, "dataset.create", dataset)
    parent = _parent_for(dataset, parent)
    name = posixpath.basename(getattr(upload, "name", "") or "")
    if not name.lower().endswith(ARCHIVE_SUFFIXES):
        raise ValidationError({"archive": "Upload a .zip, .tar, .tar.gz or .tgz file."})
    _check_quota(dataset.project.tenant, upload.size)
    _check_archive(upload, name)
    key = f"archives/{uuid.uuid4().hex}/archive"
    saved = default_storage.save(key, upload)
    with transaction.atomic():
        archive = ArchiveImport.objects.create(
            dataset=dataset,
            parent=parent,
            file_name=name[:255],
            staging_key=saved,
            size=upload.size,
            created_by=actor,
        )
        audit.record(actor, "dataset.archive", archive, tenant=dataset.tenant, name=name)
        from datasets.tasks import enqueue

        transaction.on_commit(lambda: enqueue("datasets.tasks.extract_archive", archive.pk))
    return archive


class ArchiveRefused(Exception):
    pass


def _archive_member_path(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    try:
        return clean_path(name.rstrip("/"))
    except ValidationError as exc:
        raise ArchiveRefused(" ".join(exc.messages)) from None


def _check_archive(upload, name: str) -> None:
    """Refuse an unsafe archive while its uploader still waits for the answer, with the
    unpacking task's own checks (names, links, file count, sizes), reading headers only."""
    seen: set[str] = set()
    try:
        for rel, _, stream in _iter_archive(upload, upload.size):
            stream.close()
            if rel in seen:
                raise ArchiveRefused(f"{rel!r} appears twice.")
            seen.add(rel)
        if not seen:
            raise ArchiveRefused("The archive holds no files.")
        _check_tree(seen)
    except ValidationError as exc:
        raise ValidationError({"archive": f"{name}: {' '.join(exc.messages)}"}) from None
    except (ArchiveRefused, zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise ValidationError({"archive": f"{name}: {exc}"}) from None
    finally:
        upload.seek(0)


def _iter_archive(source, compressed_size: int):
    """(relative path, size, open stream) of each regular file, refusing anything unsafe.
    `source` is a path or an open file."""
    max_files = settings.GANTRY_ARCHIVE_MAX_FILES
    max_bytes = settings.GANTRY_ARCHIVE_MAX_BYTES
    ratio = settings.GANTRY_ARCHIVE_MAX_RATIO
    total = count = 0

    def account(size: int) -> None:
        nonlocal total, count
        total += size
        count += 1
        if count > max_files:
            raise ArchiveRefused(f"More than {max_files} files.")
        if total > max_bytes:
            raise ArchiveRefused(f"Unpacks to more than {_human(max_bytes)}.")
        if total > 1024 * 1024 and total > ratio * max(compressed_size, 1):
            raise ArchiveRefused(
                f"Unpacks to more than {ratio} times its size: refused as a possible archive bomb."
            )

    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            for info in zf.infolist():
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise ArchiveRefused(f"{info.filename!r} is a link; links are not allowed.")
                if info.is_dir():
                    continue
                if info.flag_bits & 0x1:
                    raise ArchiveRefused(f"{info.filename!r} is encrypted.")
                rel = _archive_member_path(info.filename)
                account(info.file_size)
                try:
                    member = zf.open(info)
                except NotImplementedError as exc:  # a compression method zipfile lacks
                    raise ArchiveRefused(f"{info.filename!r}: {exc}") from None
                yield rel, info.file_size, member
        return
    if not isinstance(source, str):
        source.seek(0)  # is_zipfile left it at the end
    where = {"name": source} if isinstance(source, str) else {"fileobj": source}
    try:
        tf = tarfile.open(mode="r:*", **where)  # noqa: SIM115 (closed by the with below)
    except tarfile.TarError as exc:
        raise ArchiveRefused(f"Not a zip or tar archive ({exc}).") from None
    with tf:
        for member in tf:
            if member.isdir():
                continue
            if member.issym() or member.islnk():
                raise ArchiveRefused(f"{member.name!r} is a link; links are not allowed.")
            if not member.isfile():
                raise ArchiveRefused(f"{member.name!r} is not a regular file.")
            rel = _archive_member_path(member.name)
            account(member.size)
            yield rel, member.size, tf.extractfile(member)


def extract_archive(import_id: int) -> ArchiveImport:
    """The body of the archive task: unpack into a new version, or into nothing at all."""
    import hashlib

    archive = ArchiveImport.objects.select_related("dataset__project__tenant").get(pk=import_id)
    if archive.state != UploadState.OPEN:
        return archive
    blobs: dict[str, Blob] = {}
    try:
        with tempfile.NamedTemporaryFile(suffix=".archive") as local:
            with default_storage.open(archive.staging_key, "rb") as src:
                while chunk := src.read(storage.CHUNK):
                    local.write(chunk)
            local.flush()
            new_bytes = 0
            for rel, declared, stream in _iter_archive(local.name, archive.size):
                if rel in blobs:
                    raise ArchiveRefused(f"{rel!r} appears twice.")
                digest = hashlib.sha256()
                size = 0
                with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as tmp, stream:
                    while chunk := stream.read(storage.CHUNK):
                        size += len(chunk)
                        if size > declared:  # a header that lies about the size
                            raise ArchiveRefused(f"{rel!r} is larger than its header says.")
                        digest.update(chunk)
                        tmp.write(chunk)
                    sha = digest.hexdigest()
                    tmp.seek(0)
                    storage.store_blob(sha, tmp)
                blobs[rel], _ = Blob.objects.get_or_create(sha256=sha, defaults={"size": size})
                new_bytes += size
            if not blobs:
                raise ArchiveRefused("The archive holds no files.")
            _check_quota(archive.dataset.project.tenant, new_bytes)
        version = _create_version(
            archive.created_by,
            archive.dataset,
            parent=archive.parent,
            new_files=blobs,
            source=VersionSource.ARCHIVE,
            source_detail={"archive": archive.file_name},
            message=f"unpacked {archive.file_name}",
        )
    except (ArchiveRefused, ValidationError, zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        message = " ".join(getattr(exc, "messages", [str(exc)]))
        ArchiveImport.objects.filter(pk=archive.pk).update(
            state=UploadState.FAILED, error=f"{archive.file_name}: {message}"[:2000]
        )
        default_storage.delete(archive.staging_key)
        archive.refresh_from_db()
        return archive
    ArchiveImport.objects.filter(pk=archive.pk).update(state=UploadState.COMMITTED, version=version)
    default_storage.delete(archive.staging_key)
    archive.refresh_from_db()
    return archive


# --- copy of a bucket prefix -----------------------------------------------------------

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
    parent = _parent_for(dataset, parent)
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
    _check_tree(rel for rel, _, _ in found)
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
        _check_quota(imp.dataset.project.tenant, total)
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
        version = _create_version(
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


# --- jobs -------------------------------------------------------------------------------


def save_job_outputs(actor, job, dataset: Dataset, message: str = "") -> DatasetVersion:
    """A new version of `dataset` holding a job's output files (worker N>0 under worker-N/)."""
    require(actor, "job.view", job)
    require(actor, "dataset.create", dataset)
    if job.project.tenant_id != dataset.project.tenant_id:
        raise ValidationError("The job and the dataset must be in the same tenant.")
    outputs = job_outputs.source().files(job)
    if not outputs:
        raise ValidationError("This job has no output files.")
    _check_quota(dataset.project.tenant, sum(f.size for f in outputs))
    blobs = {}
    for output in outputs:
        storage.copy_to_blob(output.sha256, output.storage_name)
        blobs[clean_path(output.path)], _ = Blob.objects.get_or_create(
            sha256=output.sha256, defaults={"size": output.size}
        )
    return _create_version(
        actor,
        dataset,
        parent=None,
        new_files=blobs,
        source=VersionSource.JOB_OUTPUT,
        source_detail={"job": job.pk},
        message=message or f"outputs of job #{job.pk}",
    )


def _whole(value: Any) -> int:
    """An id or number as a JSON body gives it: a whole number (or its digits), never
    true (which int() reads as 1) or 1.5 (which it reads as 1)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"not a whole number: {value!r:.50}")
    return int(value)


def clean_job_inputs(actor, project, inputs: list) -> list:
    """Resolve dataset entries of a job's `inputs` to pinned versions.

    An entry `{"dataset": <id or slug in the project>, "version": <number or "latest">,
    "mount": "data/<slug>"}` or `{"dataset_version": <id>}` becomes
    `{"dataset_version": id, "dataset": slug, "version": n, "mount": ...}`, so the job
    reads exactly the version it was submitted with. Entries that already list files
    are left as they are.
    """
    cleaned, mounts = [], set()
    for entry in inputs:
        if not isinstance(entry, dict):
            raise ValidationError({"inputs": f"Each input is an object, not {entry!r:.50}."})
        if "dataset" not in entry and "dataset_version" not in entry:
            cleaned.append(_clean_listed_input(entry))
            continue
        versions = DatasetVersion.objects.visible_to(actor).select_related("dataset__project")
        try:
            if "dataset_version" in entry:
                version = versions.filter(pk=_whole(entry["dataset_version"])).first()
            else:
                ref = entry["dataset"]
                datasets = Dataset.objects.visible_to(actor)
                ds = (
                    datasets.filter(pk=ref).first()
                    if isinstance(ref, int) and not isinstance(ref, bool)
                    else datasets.filter(project=project, slug=str(ref)).first()
                )
                number = entry.get("version", "latest")
                if ds is None:
                    version = None
                elif number in (None, "", "latest"):
                    version = versions.filter(dataset=ds).order_by("-number").first()
                else:
                    version = versions.filter(dataset=ds, number=_whole(number)).first()
        except (TypeError, ValueError):
            raise ValidationError({"inputs": f"Cannot read the input {entry!r:.100}."}) from None
        if (
            version is None
            or version.dataset.project.tenant_id != project.tenant_id
            or not can(actor, "dataset.view", version)
        ):
            raise ValidationError({"inputs": f"No such dataset version: {entry!r:.100}."})
        mount = entry.get("mount") or f"data/{version.dataset.slug}"
        try:
            mount = clean_path(str(mount).strip("/"))
        except ValidationError as exc:
            raise ValidationError({"inputs": exc.messages}) from None
        if mount in mounts:
            raise ValidationError({"inputs": f"Two inputs are mounted at {mount}."})
        mounts.add(mount)
        cleaned.append(
            {
                "dataset_version": version.pk,
                "dataset": version.dataset.slug,
                "version": version.number,
                "mount": mount,
            }
        )
    return cleaned


def _staging_parts(value: Any) -> list[str]:
    """The segments of a mount or listed file path, by executor/staging.py's rules."""
    if (
        not isinstance(value, str)
        or "\x00" in value
        or "\\" in value
        or value.startswith("/")
        or value[1:2] == ":"
    ):
        raise ValidationError({"inputs": f"{value!r:.100}: not a path inside the job's folder."})
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValidationError({"inputs": f"{value!r:.100}: not a path inside the job's folder."})
    return parts


def _clean_listed_input(entry: dict) -> dict:
    """An input that lists its files (a model version's, from modelhub's predict): refused
    here, at submit, where the executor would refuse to stage it, rather than accepted
    and failed when the job starts."""
    files = entry.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise ValidationError(
            {"inputs": f"An input names a dataset or lists its files: {entry!r:.100}."}
        )
    mount = _staging_parts(entry.get("mount", ""))
    for f in files:
        parts = mount + _staging_parts(f.get("path"))
        if len(parts) == len(mount) or parts[0] == ".gantry":
            raise ValidationError({"inputs": f"{f.get('path')!r:.100}: not a usable file path."})
    return entry


def inputs_for_executor(job, file_url: Callable[[int], str]) -> list:
    """The job's inputs as the executor wants them: per mount, each file's URL, size and
    sha256 (presigned GETs on S3; on the filesystem `file_url(file id)`, the agent API's
    URL that the job token opens)."""
    result = []
    for entry in job.inputs or []:
        if not isinstance(entry, dict) or "dataset_version" not in entry:
            result.append(entry)
            continue
        files = DatasetFile.objects.filter(version_id=entry["dataset_version"]).order_by("path")
        listed = []
        for f in files.values("pk", "path", "blob_id", "size").iterator(chunk_size=BATCH):
            if storage.is_s3():
                url = storage.presigned_get(blob_key(f["blob_id"]))
            else:
                url = file_url(f["pk"])
            listed.append(
                {"path": f["path"], "url": url, "sha256": f["blob_id"], "size": f["size"]}
            )
        result.append({"mount": entry["mount"], "files": listed, "read_only": True})
    return result


def executor_may_read(job, file: DatasetFile) -> bool:
    versions = {e.get("dataset_version") for e in job.inputs or [] if isinstance(e, dict)}
    return file.version_id in versions
