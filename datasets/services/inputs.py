"""Dataset versions as job inputs: pinned at submit, listed file by file for the
executor, and the check that a job's token may read a file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError

from datasets import storage
from datasets.models import Dataset, DatasetFile, DatasetVersion, blob_key
from datasets.services.paths import BATCH, clean_path
from projects.permissions import can


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
