"""List filters: the API's backend skips the filter form only when no filter is asked for,
and a list page's choice options say what Django's own select says."""

import re

import pytest
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from core.templatetags.gantry import filter_options
from jobs.filters import JobFilterSet
from jobs.services.submit import submit_job
from projects.models import Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(owner, project):
    first = submit_job(owner, project, name="first", command="python -c pass")
    second = submit_job(owner, project, name="second", command="python -c pass")
    return first, second


def ids(response):
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_an_unfiltered_list_lists_everything_visible(api_for, owner, jobs):
    assert ids(api_for(owner).get("/api/v1/jobs/")) == {j.pk for j in jobs}


def test_filters_still_filter_and_refuse_bad_values(api_for, owner, jobs):
    api = api_for(owner)
    assert ids(api.get("/api/v1/jobs/?q=second")) == {jobs[1].pk}
    assert ids(api.get("/api/v1/jobs/?status=cancelled")) == set()
    bad = api.get("/api/v1/jobs/?status=exploded")
    assert bad.status_code == 400 and "status" in bad.json()
    # Unknown parameters are not filters: the list is whole, as before.
    assert ids(api.get("/api/v1/jobs/?page_size=10&colour=blue")) == {j.pk for j in jobs}


def test_outsiders_see_nothing_without_a_filter(api_for, outsider, jobs):
    assert ids(api_for(outsider).get("/api/v1/jobs/")) == set()


def test_filter_options_match_the_select_widget(owner, project, tenant):
    Project.objects.create(tenant=tenant, name="Speech", slug="speech")
    request = RequestFactory().get("/jobs/", {"project": project.pk})
    request.user = owner
    form = JobFilterSet(request.GET, request=request).form
    with CaptureQueriesContext(connection) as queries:
        html = str(filter_options(form, "project"))
    assert len(queries) <= 3  # access (roles, project ids) and one plain query for the rows
    assert not any("CURSOR" in q["sql"] for q in queries.captured_queries)
    option = re.compile(r"<option[^>]*>[^<]*</option>")
    assert option.findall(html) == option.findall(str(form["project"]))  # Django's own <select>
    assert f'<option value="{project.pk}" selected>' in html and "All projects" in html
