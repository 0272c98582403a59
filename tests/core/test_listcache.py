"""core.listcache: repeated API job lists answered from the shared cache, and never
once a job, an image record, a username or anyone's access changed.

These tests commit (transaction=True): answers are only kept outside transactions, and
generations move on commit. The SQLite pass has no Redis: the process's own cache
stands in for it, which is enough for one process.
"""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import Membership, TokenScope
from core import listcache
from images.models import JobImage
from jobs import services
from jobs.models import Job
from projects import services as project_services
from projects.models import Visibility

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/jobs/"


@pytest.fixture(autouse=True)
def shared_caches(settings):
    settings.GANTRY_ACCESS_CACHE = True
    settings.GANTRY_LIST_CACHE = True
    listcache.DOOR_PATHS.clear()  # each test sees the door learn its path


def api_as(user):
    _, key = account_services.create_api_token(actor=user, name="cli", scope=TokenScope.WRITE)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key}")


def listed(api, url=URL, **headers):
    response = api.get(url, **headers)
    assert response.status_code == 200, response.content
    return {row["name"]: row for row in response.json()["results"]}


@pytest.fixture
def job(owner, project):
    return services.submit_job(owner, project, name="train", command="python -c pass")


def test_a_repeated_list_reads_nothing_from_the_database(owner, job):
    api = api_as(owner)
    first = api.get(URL)
    with CaptureQueriesContext(connection) as queries:
        again = api.get(URL)
    assert again.json() == first.json() and "train" in listed(api)
    assert len(queries) == 0, [q["sql"] for q in queries]


def test_a_submitted_job_shows_at_once(owner, project, job):
    api = api_as(owner)
    assert set(listed(api)) == {"train"}
    services.submit_job(owner, project, name="second", command="python -c pass")
    assert set(listed(api)) == {"train", "second"}


def test_queryset_updates_and_transitions_show_at_once(owner, job):
    api = api_as(owner)
    assert listed(api)["train"]["state"] == "queued"
    Job.objects.filter(pk=job.pk).update(queue_position=7)  # no signal: the queryset tells
    assert listed(api)["train"]["queue_position"] == 7
    services.cancel_job(owner, job)
    assert listed(api)["train"]["state"] == "cancelled"


def test_bulk_created_jobs_show_at_once(owner, project, job):
    api = api_as(owner)
    assert len(listed(api)) == 1
    Job.objects.bulk_create([Job(project=project, name=f"bulk {i}") for i in range(3)])
    assert len(listed(api)) == 4


def test_names_from_other_tables_follow_their_changes(owner, job):
    api = api_as(owner)
    assert listed(api)["train"]["created_by"] == "olivia"
    owner.username = "olivia2"
    owner.save()
    assert listed(api)["train"]["created_by"] == "olivia2"
    JobImage.objects.create(job=job, reference="registry.example/lab/torch:2", digest="")
    assert listed(api)["train"]["image_reference"] == "registry.example/lab/torch:2"


def test_losing_access_empties_the_list_at_once(owner, member, tenant, project, job):
    api = api_as(member)
    assert set(listed(api)) == {"train"}
    project_services.update_project(actor=owner, project=project, visibility=Visibility.PRIVATE)
    assert set(listed(api)) == set()
    account_services.remove_member(actor=owner, membership=Membership.objects.get(user=member))
    assert listed(api) == {}


def test_each_user_and_each_url_has_its_own_answer(owner, outsider, project, other_project, job):
    services.submit_job(outsider, other_project, name="theirs", command="python -c pass")
    mine, theirs = api_as(owner), api_as(outsider)
    assert set(listed(mine)) == {"train"}
    assert set(listed(theirs)) == {"theirs"}
    assert set(listed(mine, f"{URL}?status=running")) == set()
    assert set(listed(mine, f"{URL}?status=queued")) == {"train"}


def test_etag_answers_304_until_the_list_changes(owner, job):
    api = api_as(owner)
    etag = api.get(URL)["ETag"]
    assert etag
    unchanged = api.get(URL, HTTP_IF_NONE_MATCH=etag)
    assert unchanged.status_code == 304 and unchanged.content == b""
    Job.objects.filter(pk=job.pk).update(name="renamed")
    changed = api.get(URL, HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag
    assert set(changed.json()["results"][0].items()) >= {("name", "renamed")}


def test_no_cache_asks_for_a_fresh_answer(owner, job):
    api = api_as(owner)
    assert "train" in listed(api)
    with connection.cursor() as cursor:  # a write no signal sees: only a fresh read shows it
        cursor.execute("UPDATE jobs_job SET name = %s WHERE id = %s", ["raw", job.pk])
    assert "train" in listed(api)
    assert "raw" in listed(api, HTTP_CACHE_CONTROL="no-cache")


def test_nothing_read_inside_a_transaction_is_kept(owner, project, job):
    api = api_as(owner)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.submit_job(owner, project, name="rolled back", command="python -c pass")
        assert set(listed(api)) == {"train", "rolled back"}
        raise RuntimeError("roll back")
    assert set(listed(api)) == {"train"}


def test_off_without_the_setting(settings, owner, job):
    settings.GANTRY_LIST_CACHE = False
    api = api_as(owner)
    api.get(URL)
    with CaptureQueriesContext(connection) as queries:
        response = api.get(URL)
    assert "ETag" not in response and any("jobs_job" in q["sql"] for q in queries)


# --- at the door: token requests answered before sessions, CSRF and DRF ----------------


@pytest.fixture
def views_run(monkeypatch):
    """How many requests reached the job list's view (past the door)."""
    from jobs.api import JobViewSet

    calls = []
    inner = JobViewSet.list

    def counted(self, request, *args, **kwargs):
        calls.append(request.get_full_path())
        return inner(self, request, *args, **kwargs)

    monkeypatch.setattr(JobViewSet, "list", counted)
    return calls


def test_a_tokens_repeated_list_is_answered_at_the_door_as_it_was(owner, job, views_run):
    api = api_as(owner)
    api.get(URL)  # the door learns the path
    first = api.get(URL)  # and keeps the answer
    with CaptureQueriesContext(connection) as queries:
        again = api.get(URL)
    assert len(views_run) == 2 and len(queries) == 0
    assert again.status_code == 200 and again.content == first.content
    for header in ("Content-Type", "ETag", "Vary", "Allow", "X-Content-Type-Options", "Content-Security-Policy"):
        assert again[header] == first[header], header
    unchanged = api.get(URL, HTTP_IF_NONE_MATCH=first["ETag"])
    assert unchanged.status_code == 304 and unchanged["ETag"] == first["ETag"]
    assert unchanged["Content-Security-Policy"] == first["Content-Security-Policy"]
    assert len(views_run) == 2
    # Another URL, another Accept, a cookie or no-cache: past the door.
    api.get(f"{URL}?status=queued")
    api.get(URL, HTTP_ACCEPT="application/json; indent=2")
    api.get(URL, HTTP_CACHE_CONTROL="no-cache")
    api.get(URL, HTTP_COOKIE="sessionid=nothing")
    assert len(views_run) == 6
    # Other API paths are not looked up at the door at all.
    assert {URL} == listcache.DOOR_PATHS


def test_the_door_never_answers_a_revoked_or_expired_token_or_an_inactive_user(owner, job, views_run, monkeypatch):
    token, key = account_services.create_api_token(actor=owner, name="cli", scope=TokenScope.WRITE)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert "train" in listed(api) and "train" in listed(api) and "train" in listed(api)
    assert len(views_run) == 2

    # Expiry is checked on each use, with no change to tell the generations.
    from core import listcache

    later = listcache.timezone.now() + timedelta(days=400)
    type(token).objects.filter(pk=token.pk).update(expires_at=later - timedelta(days=1))
    assert "train" in listed(api)  # the update moved "auth": answered afresh, kept again
    monkeypatch.setattr(listcache.timezone, "now", lambda: later)
    assert api.get(URL).status_code == 401
    monkeypatch.undo()

    other, other_key = account_services.create_api_token(actor=owner, name="ci", scope=TokenScope.WRITE)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    assert "train" in listed(api) and "train" in listed(api)
    account_services.revoke_api_token(actor=owner, token=other)
    assert api.get(URL).status_code == 401

    _, third_key = account_services.create_api_token(actor=owner, name="ci", scope=TokenScope.WRITE)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {third_key}")
    assert "train" in listed(api) and "train" in listed(api)
    owner.is_active = False
    owner.save()
    assert api.get(URL).status_code == 401


def test_the_door_follows_jobs_and_access(owner, member, project, job):
    api = api_as(member)
    assert set(listed(api)) == {"train"} and set(listed(api)) == {"train"}
    services.submit_job(owner, project, name="second", command="python -c pass")
    assert set(listed(api)) == {"train", "second"}
    account_services.remove_member(actor=owner, membership=Membership.objects.get(user=member))
    assert listed(api) == {}


def test_the_door_leaves_bad_hosts_to_django(owner, job):
    api = api_as(owner)
    assert "train" in listed(api) and "train" in listed(api)  # the path is known at the door
    assert api.get(URL, HTTP_HOST="evil.example").status_code == 400
