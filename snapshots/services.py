"""Every change to code snapshots: create (with the manifest), receive a blob, finalize;
and what jobs ask of them (the snapshot a job names, its files for the executor).

Blob reuse is per tenant: content counts as held only when a file of the same tenant
(a snapshot's or a dataset version's) already refers to it, so one tenant can never learn
whether another holds a file, nor name another's content without sending its bytes.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core import audit
from core.formatting import format_size
from datasets import storage
from datasets.models import Blob, DatasetFile, blob_key
from datasets.services import cleanup
from datasets.services.paths import BATCH, check_tree, clean_path
from datasets.services.quotas import check_quota
from projects.permissions import can, require
from snapshots.models import CodeSnapshot, SnapshotFile, SnapshotState

SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
GIT_COMMIT = re.compile(r"^[0-9a-f]{7,64}\Z")
DEFAULT_MODE = 0o644
BIGGEST_SHOWN = 5


def _whole(value: Any, what: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError({"files": f"{path}: {what} must be a whole number, not {value!r:.40}."})
    return value


def _clean_file(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ValidationError({"files": f"Each file is an object, not {entry!r:.60}."})
    try:
        path = clean_path(entry.get("path"))
    except ValidationError as exc:
        raise ValidationError({"files": exc.messages}) from None
    size = _whole(entry.get("size"), "size", path)
    sha = entry.get("sha256")
    if not isinstance(sha, str) or not SHA256.match(sha.lower()):
        raise ValidationError({"files": f"{path}: sha256 must be 64 hex digits."})
    mode = entry.get("mode", DEFAULT_MODE)
    if _whole(mode, "mode", path) > 0o7777:
        raise ValidationError({"files": f"{path}: mode must be a permission mode (at most 0o7777)."})
    # Only the executable bit matters: staged files are read-only whatever they were.
    return {"path": path, "size": size, "sha256": sha.lower(), "mode": 0o755 if mode & 0o111 else 0o644}


def clean_manifest(files: Any) -> list[dict[str, Any]]:
    """The client's file list, checked: safe relative paths, each once, within the limits."""
    if not isinstance(files, list) or not files:
        raise ValidationError({"files": "List the files of the snapshot (at least one)."})
    max_files = settings.GANTRY_SNAPSHOT_MAX_FILES
    if len(files) > max_files:
        raise ValidationError(
            f"{len(files)} files is more than a code snapshot may hold ({max_files}); "
            "leave data and build outputs out (.gitignore or .gantryignore) and send them "
            "as a dataset."
        )
    cleaned = [_clean_file(entry) for entry in files]
    paths = [f["path"] for f in cleaned]
    if len(set(paths)) != len(paths):
        seen: set[str] = set()
        twice = next(p for p in paths if p in seen or seen.add(p))
        raise ValidationError({"files": f"{twice} is listed twice."})
    try:
        check_tree(paths)
    except ValidationError as exc:
        raise ValidationError({"files": exc.messages}) from None
    check_size(cleaned)
    return sorted(cleaned, key=lambda f: f["path"])


def check_size(files: list[dict[str, Any]]) -> None:
    limit = settings.GANTRY_SNAPSHOT_MAX_MB * 1024 * 1024
    total = sum(f["size"] for f in files)
    if total <= limit:
        return
    biggest = sorted(files, key=lambda f: -f["size"])[:BIGGEST_SHOWN]
    named = ", ".join(f"{f['path']} ({format_size(f['size'])})" for f in biggest)
    raise ValidationError(
        f"The snapshot holds {format_size(total)}, more than the limit of "
        f"{format_size(limit)}. The biggest files: {named}. Leave data and weights out "
        "(.gitignore or .gantryignore) and send them as a dataset."
    )


def clean_git(git: Any) -> dict[str, Any]:
    if git is None:
        return {"git_commit": "", "git_dirty": None, "git_branch": ""}
    if not isinstance(git, dict):
        raise ValidationError({"git": "An object {commit, dirty, branch}, or null."})
    commit = git.get("commit") or ""
    dirty = git.get("dirty")
    branch = git.get("branch") or ""
    if not isinstance(commit, str) or (commit and not GIT_COMMIT.match(commit.lower())):
        raise ValidationError({"git": "commit: a hex commit id."})
    if dirty is not None and not isinstance(dirty, bool):
        raise ValidationError({"git": "dirty: true or false."})
    if not isinstance(branch, str) or len(branch) > 255 or not branch.isprintable():
        raise ValidationError({"git": "branch: a branch name (at most 255 characters)."})
    return {"git_commit": commit.lower(), "git_dirty": dirty, "git_branch": branch}


def manifest_digest(files: Iterable[dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f['path']}\0{f['mode']:o}\0{f['sha256']}\n".encode())
    return digest.hexdigest()


def held_by_tenant(tenant_id: int, shas: Iterable[str]) -> set[str]:
    """The contents among `shas` this tenant already holds (in a snapshot or a dataset)."""
    shas = list(set(shas))
    held: set[str] = set()
    for i in range(0, len(shas), BATCH):
        chunk = shas[i : i + BATCH]
        held.update(
            SnapshotFile.objects.filter(
                snapshot__project__tenant_id=tenant_id, blob_id__in=chunk
            ).values_list("blob_id", flat=True)
        )
        held.update(
            DatasetFile.objects.filter(
                version__dataset__project__tenant_id=tenant_id, blob_id__in=chunk
            ).values_list("blob_id", flat=True)
        )
    return held


def missing_blobs(snapshot: CodeSnapshot) -> list[str]:
    return sorted(
        set(snapshot.files.filter(blob=None).values_list("sha256", flat=True))
    )


@transaction.atomic
def create_snapshot(actor, project, files: Any, git: Any = None) -> tuple[CodeSnapshot, list[str]]:
    """A snapshot of `files` (the client's manifest) in `project`, and the contents still
    to send. With nothing to send it is ready at once (one round trip for an unchanged
    tree)."""
    require(actor, "snapshot.create", project)
    cleaned = clean_manifest(files)
    git_fields = clean_git(git)
    # One snapshot starting at a time per tenant, so two cannot both take the last bytes.
    type(project.tenant).objects.select_for_update().filter(pk=project.tenant_id).first()
    held = held_by_tenant(project.tenant_id, (f["sha256"] for f in cleaned))
    missing = sorted({f["sha256"] for f in cleaned} - held)
    check_snapshot_quota(project, cleaned, set(missing))
    snapshot = CodeSnapshot.objects.create(
        project=project,
        created_by=actor,
        digest=manifest_digest(cleaned),
        file_count=len(cleaned),
        size=sum(f["size"] for f in cleaned),
        state=SnapshotState.PENDING if missing else SnapshotState.READY,
        ready_at=None if missing else timezone.now(),
        **git_fields,
    )
    SnapshotFile.objects.bulk_create(
        [
            SnapshotFile(
                snapshot=snapshot,
                blob_id=f["sha256"] if f["sha256"] in held else None,
                **f,
            )
            for f in cleaned
        ],
        batch_size=BATCH,
    )
    audit.record(actor, "snapshot.create", snapshot, files=len(cleaned), missing=len(missing))
    return snapshot, missing


def check_snapshot_quota(project, files: list[dict[str, Any]], missing: set[str]) -> None:
    """The contents the tenant does not hold yet must fit in its storage quota (snapshot
    blobs count there, beside datasets' and checkpoints'). Contents another pending
    snapshot already waits for are reserved once (a client retrying after a broken
    upload does not pay twice)."""
    waiting = _waited_for(project.tenant_id)
    new_bytes = sum(
        {f["sha256"]: f["size"] for f in files if f["sha256"] in missing - waiting.keys()}.values()
    )
    if not new_bytes:
        return
    try:
        check_quota(project.tenant, new_bytes)
    except ValidationError as exc:
        raise ValidationError(
            f"The code snapshot does not fit in the storage quota: {' '.join(exc.messages)} "
            "Leave data and weights out (.gitignore or .gantryignore), delete old dataset "
            "versions, or ask a lab administrator for more."
        ) from None


def _waited_for(tenant_id: int) -> dict[str, int]:
    """Contents (sha256 -> size) the tenant's pending snapshots still wait for."""
    return dict(
        SnapshotFile.objects.filter(
            snapshot__project__tenant_id=tenant_id,
            snapshot__state=SnapshotState.PENDING,
            blob__isnull=True,
        )
        .values_list("sha256", "size")
        .distinct()
    )


def pending_snapshot_bytes(tenant) -> int:
    """Bytes reserved in the storage quota for what pending snapshots wait for, until
    their files arrive or they expire (contents the tenant holds by then cost nothing)."""
    waiting = _waited_for(tenant.pk)
    held = held_by_tenant(tenant.pk, waiting)
    return sum(size for sha, size in waiting.items() if sha not in held)


def tenant_snapshot_blobs(tenant):
    """The blobs a tenant's snapshots hold (datasets' quota service counts them)."""
    return SnapshotFile.objects.filter(snapshot__project__tenant=tenant, blob__isnull=False).values(
        "blob"
    )


def expire_pending_snapshots(now=None) -> int:
    """Delete snapshots still pending GANTRY_SNAPSHOT_PENDING_HOURS after they were created
    (an upload given up), then the contents only they held (datasets' garbage collection,
    limited to those contents; one that arrived within its grace hour waits for the daily
    run). Returns how many snapshots went."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.GANTRY_SNAPSHOT_PENDING_HOURS)
    stale = CodeSnapshot.objects.filter(
        state=SnapshotState.PENDING, created_at__lt=cutoff, jobs=None
    ).values_list("pk", flat=True)
    removed = 0
    for pk in list(stale[:1000]):
        with transaction.atomic():
            snapshot = (
                CodeSnapshot.objects.select_for_update()
                .filter(pk=pk, state=SnapshotState.PENDING)
                .select_related("project__tenant")
                .first()
            )
            if snapshot is None:  # finalized meanwhile
                continue
            shas = sorted(set(snapshot.files.exclude(blob=None).values_list("blob_id", flat=True)))
            audit.record(None, "snapshot.expire", snapshot, files=snapshot.file_count)
            snapshot.delete()
        for i in range(0, len(shas), BATCH):
            cleanup.collect_garbage(now=now, among=shas[i : i + BATCH])
        removed += 1
    return removed


def receive_blob(actor, snapshot: CodeSnapshot, sha256: str, stream) -> None:
    """Store one missing content of `snapshot` after checking its size and sha256
    against the manifest; nothing changes when they do not match. Idempotent."""
    require(actor, "snapshot.create", snapshot)
    sha256 = (sha256 or "").lower()
    if not SHA256.match(sha256):
        raise ValidationError("The blob's name is its sha256: 64 hex digits.")
    entry = snapshot.files.filter(sha256=sha256).values("size", "blob_id").first()
    if entry is None:
        raise ValidationError(f"No file of code snapshot #{snapshot.pk} has the content {sha256}.")
    if entry["blob_id"] is not None:
        return  # held already: the bytes are not needed again
    expected = entry["size"]
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as tmp:
        digest, size = hashlib.sha256(), 0
        while chunk := stream.read(storage.CHUNK):
            size += len(chunk)
            if size > expected:
                break
            digest.update(chunk)
            tmp.write(chunk)
        if size != expected:
            raise ValidationError(
                f"The content {sha256} is {expected} bytes in the manifest; "
                f"{'more' if size > expected else size} arrived."
            )
        if digest.hexdigest() != sha256:
            raise ValidationError(
                f"The bytes sent do not have the sha256 {sha256} (damaged on the way?); "
                "send them again."
            )
        tmp.seek(0)
        storage.store_blob(sha256, tmp)
    # One transaction (one commit: on SQLite each commit is a disk sync, most of a PUT).
    with transaction.atomic():
        try:
            with transaction.atomic():
                Blob.objects.get_or_create(sha256=sha256, defaults={"size": expected})
        except IntegrityError:  # a concurrent upload of the same content created it
            pass
        SnapshotFile.objects.filter(snapshot=snapshot, sha256=sha256, blob=None).update(
            blob_id=sha256
        )


def _take_member(tar, member, sha: str, size: int, folder: str) -> str:
    """One tar member's bytes into `folder`, checked against the manifest's sha256."""
    source = tar.extractfile(member)
    digest = hashlib.sha256()
    path = f"{folder}/{sha}"
    with open(path, "wb") as out:
        while chunk := source.read(storage.CHUNK):
            digest.update(chunk)
            out.write(chunk)
    if member.size != size or digest.hexdigest() != sha:
        raise ValidationError(
            f"{member.name}: the bytes do not have that sha256 and size (damaged on the way?); "
            "nothing of this batch was kept."
        )
    return path


def receive_blobs(actor, snapshot: CodeSnapshot, stream) -> list[str]:
    """Many contents in one request: a tar whose members are named by their sha256 (the
    CLI sends small files this way; one request each costs more than the bytes). Every
    member is checked before any is kept: one bad member refuses the whole batch."""
    require(actor, "snapshot.create", snapshot)
    wanted = dict(snapshot.files.filter(blob=None).values_list("sha256", "size"))
    taken: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gantry-blobs-") as folder:
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    sha = member.name.lower().removeprefix("./")
                    if not member.isfile() or not SHA256.match(sha):
                        raise ValidationError(
                            f"{member.name[:80]}: members are plain files named by their sha256."
                        )
                    if sha in taken or sha not in wanted:
                        continue  # held already, or sent twice: the bytes are not needed
                    taken[sha] = _take_member(tar, member, sha, wanted[sha], folder)
        except (tarfile.TarError, EOFError) as exc:
            raise ValidationError(f"The body is not a readable tar archive: {exc}") from None
        for sha, path in taken.items():
            with open(path, "rb") as fh:
                storage.store_blob(sha, fh)
    with transaction.atomic():
        Blob.objects.bulk_create(
            [Blob(sha256=sha, size=wanted[sha]) for sha in taken], ignore_conflicts=True
        )
        SnapshotFile.objects.filter(snapshot=snapshot, sha256__in=list(taken), blob=None).update(
            blob_id=F("sha256")
        )
    return sorted(taken)


@transaction.atomic
def finalize_snapshot(actor, snapshot: CodeSnapshot) -> CodeSnapshot:
    """Mark the snapshot ready once every content has arrived (ValidationError naming the
    missing ones otherwise); a ready snapshot answers as it is."""
    require(actor, "snapshot.create", snapshot)
    snapshot = CodeSnapshot.objects.select_for_update().get(pk=snapshot.pk)
    if snapshot.is_ready:
        return snapshot
    missing = missing_blobs(snapshot)
    if missing:
        raise ValidationError(
            {
                "detail": f"{len(missing)} file content(s) have not arrived yet.",
                "missing": missing,
            }
        )
    snapshot.state = SnapshotState.READY
    snapshot.ready_at = timezone.now()
    snapshot.save(update_fields=["state", "ready_at"])
    audit.record(actor, "snapshot.ready", snapshot)
    return snapshot


def snapshot_for_job(actor, project, value: Any) -> CodeSnapshot | None:
    """The code snapshot a job submitted to `project` names (an instance or an id), if
    the actor may see it, it is ready and it belongs to the same project."""
    if value in (None, ""):
        return None
    if isinstance(value, CodeSnapshot):
        pk = value.pk
    elif isinstance(value, int) and not isinstance(value, bool):
        pk = value
    elif isinstance(value, str) and value.strip().isdigit():
        pk = int(value.strip())
    else:
        raise ValidationError({"code_snapshot": f"A code snapshot id, not {value!r:.40}."})
    snapshot = CodeSnapshot.objects.visible_to(actor).filter(pk=pk).first()
    if snapshot is None or not can(actor, "snapshot.view", snapshot):
        raise ValidationError({"code_snapshot": f"No such code snapshot: {pk}."})
    if snapshot.project_id != project.pk:
        raise ValidationError(
            {
                "code_snapshot": f"Code snapshot #{pk} belongs to project "
                f"{snapshot.project.name}, not {project.name}: upload the code to this project."
            }
        )
    if not snapshot.is_ready:
        raise ValidationError(
            {"code_snapshot": f"Code snapshot #{pk} is still uploading: finalize it first."}
        )
    return snapshot


def files_for_executor(snapshot: CodeSnapshot, blob_url: Callable[[str], str]) -> list[dict]:
    """The manifest the executor stages: path, size, sha256, mode and where to GET each
    content (presigned on S3; `blob_url(sha256)`, the agent API, on the filesystem)."""
    files = []
    rows = snapshot.files.order_by("path").values("path", "size", "sha256", "mode")
    for f in rows.iterator(chunk_size=BATCH):
        url = storage.presigned_get(blob_key(f["sha256"])) if storage.is_s3() else blob_url(f["sha256"])
        files.append({**f, "url": url})
    return files


def executor_may_read_blob(snapshot_id: int | None, sha256: str) -> bool:
    return snapshot_id is not None and SnapshotFile.objects.filter(
        snapshot_id=snapshot_id, sha256=sha256, blob__isnull=False
    ).exists()
