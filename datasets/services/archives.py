"""Zip / tar uploads: refused at once when unsafe, unpacked by a task into a new version
(or into nothing at all)."""

from __future__ import annotations

import posixpath
import stat
import tarfile
import tempfile
import uuid
import zipfile

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.db import transaction

from core import audit
from datasets import storage
from datasets.models import ArchiveImport, Blob, Dataset, UploadState, VersionSource
from datasets.services.paths import check_tree, clean_path, human
from datasets.services.quotas import check_quota
from datasets.services.versions import create_version, parent_for
from projects.permissions import require

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")


class ArchiveRefused(Exception):
    pass


def start_archive_import(actor, dataset: Dataset, upload, parent="latest") -> ArchiveImport:
    """Keep an uploaded zip / tar / tar.gz and queue the task that unpacks it."""
    require(actor, "dataset.create", dataset)
    parent = parent_for(dataset, parent)
    name = posixpath.basename(getattr(upload, "name", "") or "")
    if not name.lower().endswith(ARCHIVE_SUFFIXES):
        raise ValidationError({"archive": "Upload a .zip, .tar, .tar.gz or .tgz file."})
    check_quota(dataset.project.tenant, upload.size)
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
        check_tree(seen)
    except ValidationError as exc:
        raise ValidationError({"archive": f"{name}: {' '.join(exc.messages)}"}) from None
    except (ArchiveRefused, zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise ValidationError({"archive": f"{name}: {exc}"}) from None
    finally:
        upload.seek(0)


def _iter_archive(source, compressed_size: int):
    """(relative path, size, open stream) of each regular file, refusing anything unsafe.
    `source` is a path or an open file."""
    account = _budget(compressed_size)
    if zipfile.is_zipfile(source):
        yield from _zip_members(source, account)
        return
    if not isinstance(source, str):
        source.seek(0)  # is_zipfile left it at the end
    yield from _tar_members(source, account)


def _budget(compressed_size: int):
    """A check to call with each member's size: it refuses the archive once it holds too
    many files, too many bytes, or unpacks to too many times its own size (a bomb)."""
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
            raise ArchiveRefused(f"Unpacks to more than {human(max_bytes)}.")
        if total > 1024 * 1024 and total > ratio * max(compressed_size, 1):
            raise ArchiveRefused(
                f"Unpacks to more than {ratio} times its size: refused as a possible archive bomb."
            )

    return account


def _zip_members(source, account):
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


def _tar_members(source, account):
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
            check_quota(archive.dataset.project.tenant, new_bytes)
        version = create_version(
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
