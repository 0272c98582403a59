"""Retention: each job keeps its last N checkpoints and its best by a metric (per project);
abandoned uploads go; what a queued job will resume from stays; blobs are then collected."""

from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from checkpoints.models import Checkpoint, CheckpointState
from checkpoints.services import begin_checkpoint, set_retention, start_job_from
from checkpoints.tasks import enforce_retention
from datasets.models import blob_key
from datasets.services.cleanup import collect_garbage
from tests.checkpoints.builders import saved, sha
from tests.jobs.test_executor_api import launched

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _files(job_settings):
    pass


def names(job):
    return sorted(Checkpoint.objects.filter(job=job).values_list("name", flat=True))


def test_keeps_the_last_n_and_the_best_by_the_projects_metric(owner, project):
    set_retention(owner, project, keep_last=2, keep_best=1, metric="val_loss")
    job, _ = launched(owner, project)
    for step, loss in [(1, 0.9), (2, 0.1), (3, 0.5), (4, 0.7), (5, 0.6)]:
        saved(job, f"step-{step}", step=step, metrics={"val_loss": loss},
              files={"w": f"weights {step}".encode()})
    assert enforce_retention() == 2
    assert names(job) == ["step-2", "step-4", "step-5"]  # the best, then the last two


def test_higher_is_better_keeps_the_highest(owner, project):
    set_retention(owner, project, keep_last=1, keep_best=1, metric="acc", higher_is_better=True)
    job, _ = launched(owner, project)
    for step, acc in [(1, 0.5), (2, 0.9), (3, 0.6)]:
        saved(job, f"step-{step}", step=step, metrics={"acc": acc}, files={"w": bytes([step])})
    enforce_retention()
    assert names(job) == ["step-2", "step-3"]


def test_without_a_policy_the_default_number_is_kept(owner, project, settings):
    settings.GANTRY_CHECKPOINT_KEEP_LAST = 1
    job, _ = launched(owner, project)
    saved(job, "step-1", files={"w": b"one"})
    saved(job, "step-2", files={"w": b"two"})
    enforce_retention()
    assert names(job) == ["step-2"]


def test_abandoned_pending_checkpoints_are_removed_and_recent_ones_kept(owner, project):
    job, _ = launched(owner, project)
    file = [{"path": "w", "size": 3, "sha256": sha(b"abc")}]
    old = begin_checkpoint(job, {"name": "old", "files": file})
    begin_checkpoint(job, {"name": "fresh", "files": file})
    Checkpoint.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=1))
    enforce_retention()
    assert names(job) == ["fresh"]
    assert Checkpoint.objects.get(name="fresh").state == CheckpointState.PENDING


def test_a_checkpoint_a_queued_job_resumes_from_is_kept(owner, project):
    set_retention(owner, project, keep_last=1, keep_best=0)
    job, _ = launched(owner, project)
    first = saved(job, "step-1", files={"w": b"one"})
    saved(job, "step-2", files={"w": b"two"})
    start_job_from(owner, first)  # queued: will stage step-1
    enforce_retention()
    assert names(job) == ["step-1", "step-2"]


def test_deleted_checkpoints_blobs_are_collected_and_kept_ones_stay(owner, project):
    set_retention(owner, project, keep_last=1, keep_best=0)
    job, _ = launched(owner, project)
    saved(job, "step-1", files={"w": b"gone soon"})
    saved(job, "step-2", files={"w": b"kept"})
    enforce_retention()
    later = timezone.now() + timedelta(hours=2)
    collect_garbage(now=later)
    assert not default_storage.exists(blob_key(sha(b"gone soon")))
    assert default_storage.exists(blob_key(sha(b"kept")))


def test_only_maintainers_set_the_policy(member, project):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        set_retention(member, project, keep_last=1)
