from tests.jobs.conftest import job_settings, running_jobs  # noqa: F401 - shared fixtures
