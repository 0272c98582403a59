"""Interactive sessions run inside real jobs: the job fixtures (tests/jobs/conftest.py)."""

from tests.jobs.conftest import job_settings, running_jobs  # noqa: F401 - fixtures
