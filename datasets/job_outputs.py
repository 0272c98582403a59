"""A job's output files saved as a dataset version, with datasets knowing nothing of jobs.

Jobs sit above datasets (jobs -> datasets, never back), so the jobs app hands in, when it
starts, what this needs of it (`provide`, from jobs/apps.py): the jobs a user may pick, one
job by id with the user's access checked, and a job's output files. The "from job outputs"
page, its API action and `datasets.services.versions.save_job_outputs` ask through `source()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet


@dataclass(frozen=True)
class OutputFile:
    """One output file: its path in the new version and where its bytes are stored."""

    path: str
    sha256: str
    size: int
    storage_name: str


class JobOutputs(Protocol):
    def jobs_with_outputs(self, user, tenant) -> QuerySet:
        """The jobs of `tenant` with output files that `user` may view, newest first."""

    def get_job(self, user, pk: Any, token=None) -> Any:
        """The job `pk` if the user (and API token) may view it; Http404 otherwise."""

    def files(self, job) -> list[OutputFile]:
        """The job's output files (worker N>0's under worker-N/)."""


_source: JobOutputs | None = None


def provide(source: JobOutputs) -> None:
    global _source
    _source = source


def source() -> JobOutputs:
    if _source is None:
        raise ImproperlyConfigured(
            "No app provides job outputs: the jobs app hands them in when it starts "
            "(is `jobs` in INSTALLED_APPS?)."
        )
    return _source
