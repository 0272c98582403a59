"""Snapshots nobody finalized are deleted with the contents only they held, and snapshot
contents count against the tenant's storage quota (a snapshot over it is refused)."""

import hashlib
import io
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.files.storage import default_storage
from django.utils import timezone

from core.models import AuditEvent
from datasets.models import Blob, StorageQuota, blob_key
from datasets.services.quotas import tenant_usage
from snapshots import services, tasks
from snapshots.models import CodeSnapshot, SnapshotFile
from tests.snapshots.builders import make_snapshot, manifest

pytestmark = pytest.mark.django_db

SHARED = b"shared = True\n"
OWN = b"only the abandoned snapshot held this\n"
NEVER = b"never sent\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pending(owner, project, files, send=()):
    snapshot, _ = services.create_snapshot(owner, project, manifest(files))
    for data in send:
        services.receive_blob(owner, snapshot, _sha(data), io.BytesIO(data))
    return snapshot


def test_pending_snapshots_past_the_limit_go_with_the_contents_only_they_held(
    owner, project, settings
):
    settings.GANTRY_SNAPSHOT_PENDING_HOURS = 24
    ready = make_snapshot(owner, project, {"train.py": b"print(1)\n", "lib.py": SHARED})
    old = _pending(
        owner, project, {"lib.py": SHARED, "own.py": OWN, "big.bin": NEVER}, send=[OWN]
    )
    CodeSnapshot.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    recent = _pending(owner, project, {"new.py": b"still uploading\n"})
    assert default_storage.exists(blob_key(_sha(OWN)))

    # Two hours on: the old one is past its 24 hours, the new one is not; the blob that
    # arrived for the old one is past the blob collector's grace hour.
    removed = services.expire_pending_snapshots(now=timezone.now() + timedelta(hours=2))

    assert removed == 1
    assert set(CodeSnapshot.objects.values_list("pk", flat=True)) == {ready.pk, recent.pk}
    assert not SnapshotFile.objects.filter(snapshot_id=old.pk).exists()
    assert not Blob.objects.filter(pk=_sha(OWN)).exists()
    assert not default_storage.exists(blob_key(_sha(OWN)))
    assert Blob.objects.filter(pk=_sha(SHARED)).exists()  # the ready snapshot holds it
    assert default_storage.exists(blob_key(_sha(SHARED)))
    assert AuditEvent.objects.filter(action="snapshot.expire", object_id=str(old.pk)).exists()
    # The hourly task finds nothing more to do.
    assert tasks.expire_pending() == 0


def test_a_pending_snapshot_keeps_a_content_another_tenant_holds(
    owner, project, outsider, other_project
):
    make_snapshot(outsider, other_project, {"lib.py": SHARED})
    old = _pending(owner, project, {"lib.py": SHARED, "x.py": NEVER}, send=[SHARED])
    CodeSnapshot.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(hours=48)
    )

    assert services.expire_pending_snapshots(now=timezone.now() + timedelta(hours=2)) == 1

    assert Blob.objects.filter(pk=_sha(SHARED)).exists()
    assert default_storage.exists(blob_key(_sha(SHARED)))


def test_snapshot_contents_count_in_the_tenant_storage(owner, project):
    before = tenant_usage(project.tenant)
    make_snapshot(owner, project, {"a.py": b"a" * 1000, "b.py": b"b" * 500, "c.py": b"a" * 1000})
    assert tenant_usage(project.tenant) == before + 1500


def test_a_snapshot_over_the_storage_quota_is_refused_and_nothing_is_stored(
    api_for, owner, project
):
    make_snapshot(owner, project, {"held.py": b"h" * 3000})
    StorageQuota.objects.create(tenant=project.tenant, bytes=4000)
    files = {"held.py": b"h" * 3000, "new.bin": b"n" * 2000}
    snapshots_before = CodeSnapshot.objects.count()

    answer = api_for(owner).post(
        "/api/v1/snapshots/", {"project": project.pk, "files": manifest(files)}, format="json"
    )

    assert answer.status_code == 400, answer.content
    detail = answer.json()["detail"]
    assert "storage quota" in detail and "needs 2.0 KB" in detail, detail
    assert CodeSnapshot.objects.count() == snapshots_before
    assert not SnapshotFile.objects.filter(path="new.bin").exists()

    # What the tenant holds already costs nothing: the same tree without the new file fits.
    fits = api_for(owner).post(
        "/api/v1/snapshots/",
        {"project": project.pk, "files": manifest({"held.py": b"h" * 3000})},
        format="json",
    )
    assert fits.status_code == 201, fits.content
    assert fits.json()["state"] == "ready"


def test_pending_snapshots_reserve_what_they_wait_for_once(owner, project, settings):
    settings.GANTRY_SNAPSHOT_PENDING_HOURS = 24
    StorageQuota.objects.create(tenant=project.tenant, bytes=5000)
    first = _pending(owner, project, {"a.bin": b"a" * 3000})
    assert tenant_usage(project.tenant) == 3000  # reserved before a byte arrived

    # A second snapshot with other new contents cannot take the reserved bytes too...
    with pytest.raises(ValidationError, match="needs 3.0 KB but the tenant has 2.0 KB"):
        _pending(owner, project, {"b.bin": b"b" * 3000})
    # ...but a retry of the same tree (the client's upload broke) is not charged twice.
    retry = _pending(owner, project, {"a.bin": b"a" * 3000, "c.py": b"c" * 100})
    assert tenant_usage(project.tenant) == 3100

    # Once the contents arrive, they count as held, once.
    services.receive_blob(owner, retry, _sha(b"a" * 3000), io.BytesIO(b"a" * 3000))
    assert tenant_usage(project.tenant) == 3100
    services.receive_blob(owner, retry, _sha(b"c" * 100), io.BytesIO(b"c" * 100))
    services.finalize_snapshot(owner, retry)
    assert tenant_usage(project.tenant) == 3100

    # A snapshot that expires gives back what it reserved.
    lone = _pending(owner, project, {"d.bin": b"d" * 1000})
    assert tenant_usage(project.tenant) == 4100
    CodeSnapshot.objects.filter(pk__in=[first.pk, lone.pk]).update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    services.expire_pending_snapshots()
    assert tenant_usage(project.tenant) == 3100


def test_the_expiry_task_is_scheduled_at_migrate():
    from django_q.models import Schedule

    assert set(tasks.SCHEDULES) <= set(Schedule.objects.values_list("name", flat=True))
