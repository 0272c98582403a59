"""A job's output file as datasets receives it, to save a job's outputs as a dataset version.

Jobs sit above datasets (jobs -> datasets, never back): the "from job outputs" page, its API
action and `datasets.services.versions.save_job_outputs` ask jobs through
`core.registry` (`jobs_with_outputs`, `job_with_outputs`, `job_output_files`), which
jobs/dataset_outputs.py answers with these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputFile:
    """One output file: its path in the new version and where its bytes are stored."""

    path: str
    sha256: str
    size: int
    storage_name: str
