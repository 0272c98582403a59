"""Deferred-join pages hold the same rows, in the same order, as plain ones; object_url
says what reverse() says."""

import pytest
from django.core.paginator import Paginator
from django.urls import reverse, set_script_prefix

from core.links import object_url
from core.paging import DeferredJoinPaginator
from jobs.models import Job
from jobs.services.submit import submit_job

pytestmark = pytest.mark.django_db


def test_deferred_join_pages_match_plain_pages(owner, project):
    for i in range(7):
        submit_job(owner, project, name=f"job {i % 3}", command="python -c pass")
    # Ties on name: the pk breaks them, as it must for pages to be stable.
    queryset = Job.objects.select_related("project", "created_by").order_by("name", "-pk")
    plain, deferred = Paginator(queryset, 3), DeferredJoinPaginator(queryset, 3)
    assert deferred.num_pages == plain.num_pages == 3
    for number in (1, 2, 3):
        rows = list(deferred.page(number).object_list)
        assert [j.pk for j in rows] == [j.pk for j in plain.page(number).object_list]
        assert all(j.project.name == "Vision" for j in rows)  # the joins came along


def test_object_url_is_reverse():
    for pk in (1, 42, 987654321):
        assert object_url("jobs:job_detail", pk) == reverse("jobs:job_detail", args=[pk])
    set_script_prefix("/gantry/")
    try:
        assert object_url("projects:project_detail", 7) == "/gantry/projects/7/"
        assert object_url("projects:project_detail", 7) == reverse("projects:project_detail", args=[7])
    finally:
        set_script_prefix("/")
