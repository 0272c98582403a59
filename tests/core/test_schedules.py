import pytest
from django_q.models import Schedule

from core.schedules import register_minute_schedules
from datasets.tasks import SCHEDULES as DATASET_SCHEDULES
from jobs.tasks import SCHEDULES as JOB_SCHEDULES

pytestmark = pytest.mark.django_db


def test_every_app_schedule_is_registered_at_migrate():
    names = set(Schedule.objects.values_list("name", flat=True))
    assert names >= set(JOB_SCHEDULES) | set(DATASET_SCHEDULES)


def test_registering_again_updates_instead_of_adding():
    register_minute_schedules({"tidy": ("jobs.tasks.cleanup", 5)})
    register_minute_schedules({"tidy": ("jobs.tasks.cleanup", 15)})
    row = Schedule.objects.get(name="tidy")
    assert (row.func, row.minutes, row.repeats, row.schedule_type) == (
        "jobs.tasks.cleanup", 15, -1, Schedule.MINUTES
    )
