"""Versions: the one place a version is born, copies of a version, a job's outputs."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from core import audit, registry
from datasets import storage
from datasets.models import Blob, Dataset, DatasetFile, DatasetVersion, VersionSource
from datasets.services.paths import BATCH, check_tree, clean_path
from datasets.services.quotas import check_quota
from projects.permissions import require


def create_version(
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
        check_tree(paths)
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


def parent_for(dataset: Dataset, parent) -> DatasetVersion | None:
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
    return create_version(
        actor,
        dataset,
        parent=source,
        new_files={},
        source=VersionSource.COPY,
        source_detail={"version": source.pk, "dataset": source.dataset_id},
        message=message or f"copy of {source}",
    )


def save_job_outputs(actor, job, dataset: Dataset, message: str = "") -> DatasetVersion:
    """A new version of `dataset` holding a job's output files (worker N>0 under worker-N/)."""
    require(actor, "job.view", job)
    require(actor, "dataset.create", dataset)
    if job.project.tenant_id != dataset.project.tenant_id:
        raise ValidationError("The job and the dataset must be in the same tenant.")
    outputs = registry.job_output_files(job)
    if not outputs:
        raise ValidationError("This job has no output files.")
    check_quota(dataset.project.tenant, sum(f.size for f in outputs))
    blobs = {}
    for output in outputs:
        storage.copy_to_blob(output.sha256, output.storage_name)
        blobs[clean_path(output.path)], _ = Blob.objects.get_or_create(
            sha256=output.sha256, defaults={"size": output.size}
        )
    return create_version(
        actor,
        dataset,
        parent=None,
        new_files=blobs,
        source=VersionSource.JOB_OUTPUT,
        source_detail={"job": job.pk},
        message=message or f"outputs of job #{job.pk}",
    )
