"""Datasets themselves: create, edit, delete."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from core import audit
from datasets.models import Dataset, UploadState
from datasets.services.quotas import LIVE
from datasets.services.staging import discard_staging
from projects.permissions import require


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
        discard_staging(session)
    with transaction.atomic():
        tenant = dataset.project.tenant
        audit.record(actor, "dataset.delete", dataset, tenant=tenant, slug=dataset.slug)
        dataset.delete()
