"""Upload sessions: open one (quota reserved), receive or sign its parts, report what
arrived, hand the commit to a task (`commits`), abort."""

from __future__ import annotations

import math
import tempfile

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from core import audit
from datasets import storage
from datasets.models import (
    Blob,
    Dataset,
    DatasetFile,
    UploadFile,
    UploadPart,
    UploadSession,
    UploadState,
)
from datasets.services.paths import (
    BATCH,
    MAX_PARTS,
    MAX_UPLOAD_FILES,
    SHA256,
    check_tree,
    clean_path,
)
from datasets.services.quotas import check_quota
from datasets.services.staging import discard_staging, gateway_parts, part_bounds
from datasets.services.versions import parent_for
from projects.permissions import require


def _part_size(sizes: list[int]) -> int:
    base = settings.GANTRY_UPLOAD_PART_MB * 1024 * 1024
    largest = max(sizes, default=0)
    need = math.ceil(largest / MAX_PARTS) if largest else 0
    mib = 1024 * 1024
    return max(base, math.ceil(need / mib) * mib)


class NothingChanged(ValidationError):
    """The upload would make a version with exactly the files of its parent."""

    def __init__(self, parent):
        self.parent = parent
        super().__init__(
            f"Nothing changed: version {parent.number} already holds exactly these files.",
            code="unchanged",
        )


def _removed(parent, parent_paths: dict[str, str], remove: list[str], exact: bool,
              listed: dict) -> list[str]:  # fmt: skip
    """The parent's paths the new version drops: each of `remove` is a file or a folder of
    the parent; with `exact`, every path the upload does not list."""
    dropped: set[str] = set()
    for path in remove:
        inside = {p for p in parent_paths if p == path or p.startswith(path + "/")}
        if not inside:
            raise ValidationError(
                {"remove": f"{path!r} is neither a file nor a folder of version {parent.number}."}
            )
        dropped |= inside
    if exact:
        dropped |= set(parent_paths) - set(listed)
    return sorted(dropped)


def start_upload(
    actor,
    dataset: Dataset,
    *,
    files: list,
    parent="latest",
    remove=(),
    exact: bool = False,
    message: str = "",
) -> UploadSession:
    """Open an upload: the files to add (path, size and, optionally, sha256) on top of
    `parent` (default: the latest version), and files or folders of the parent to drop;
    with `exact`, the new version holds the listed files and nothing else.

    A file whose sha256 is already held by a version in the same tenant is linked
    without uploading it (never across tenants: that would tell who holds what).
    An upload that would change nothing (every file listed with the sha256 its parent
    holds at that path, nothing dropped) raises NothingChanged and opens nothing.
    The quota is checked here, before a byte moves, and the bytes are reserved.
    """
    require(actor, "dataset.create", dataset)
    parent = parent_for(dataset, parent)
    if not isinstance(files, list) or not isinstance(remove, list | tuple):
        raise ValidationError("files and remove are lists.")
    if not files and not remove and not exact:
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
    parent_paths = dict(parent.files.values_list("path", "blob_id")) if parent is not None else {}
    remove = _removed(parent, parent_paths, remove, exact, cleaned) if parent is not None else []
    if not cleaned and not remove:
        raise ValidationError({"files": "Add at least one file (or remove one)."})
    if parent is not None and not remove and all(
        sha is not None and parent_paths.get(path) == sha for path, (_, sha) in cleaned.items()
    ):
        raise NothingChanged(parent)
    check_tree(cleaned)

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
        check_quota(tenant, reserve)
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


def open_session(actor, session: UploadSession) -> UploadSession:
    require(actor, "dataset.create", session)
    if session.state != UploadState.OPEN:
        raise ValidationError(f"This upload is {session.get_state_display().lower()}.")
    return session


def _touch(session: UploadSession) -> None:
    UploadSession.objects.filter(pk=session.pk).update(updated_at=timezone.now())


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
    open_session(actor, session)
    if session.backend != "filesystem":
        raise ValidationError("This upload goes straight to object storage: ask for part URLs.")
    expected = part_bounds(session, file, number)
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
    open_session(actor, session)
    if session.backend != "s3":
        raise ValidationError("This upload goes through Gantry: PUT the parts to the part URL.")
    if not isinstance(numbers, list) or not numbers or len(numbers) > 1000:
        raise ValidationError("Ask for 1 to 1000 part numbers at a time.")
    for n in numbers:
        part_bounds(session, file, n)
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
    open_session(actor, session)
    if session.backend != "s3" or not file.s3_upload_id:
        raise ValidationError("Ask for the part's URL first.")
    expected = part_bounds(session, file, number)
    sha256 = (sha256 or "").lower()
    if not SHA256.match(sha256):
        raise ValidationError("sha256 must be 64 hex digits.")
    held = gateway_parts(file).get(number)
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


def commit_upload(actor, session: UploadSession) -> UploadSession:
    """Check that every part of every file arrived, then hand the commit to a task.

    The task (`finish_commit`) reads each file once to compute its sha256 — on S3 in
    the worker, not the web server — and creates the version in one transaction.
    """
    with transaction.atomic():
        session = UploadSession.objects.select_for_update().get(pk=session.pk)
        open_session(actor, session)
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


def abort_upload(actor, session: UploadSession) -> UploadSession:
    require(actor, "dataset.create", session)
    if session.state not in (UploadState.OPEN, UploadState.FAILED):
        raise ValidationError(f"This upload is {session.get_state_display().lower()}.")
    discard_staging(session)
    audit.record(actor, "dataset.upload_abort", session, tenant=session.tenant)
    session.refresh_from_db()
    return session
