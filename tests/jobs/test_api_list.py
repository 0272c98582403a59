"""The job list's hand-built serializer says exactly what the declared fields say,
and the list reads only the columns it shows, in a fixed number of queries."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from images.models import RuntimeImage
from jobs.api import JOB_LIST_COLUMNS, JobListSerializer, JobSerializer
from jobs.models import Job, JobImage, JobScheduling
from jobs.services.submit import submit_job

pytestmark = pytest.mark.django_db


class GenericListSerializer(JobSerializer):
    """JobListSerializer's fields through DRF's own per-field path."""

    class Meta(JobListSerializer.Meta):
        pass


@pytest.fixture
def jobs(owner, project):
    plain = submit_job(owner, project, name="plain", command="python -c pass")
    done = submit_job(owner, project, name="done ✓", command="python -c pass", gpus=0)
    started = timezone.now() - timedelta(minutes=5, microseconds=123)
    Job.objects.filter(pk=done.pk).update(
        state="succeeded",
        state_reason="exited with code 0",
        started_at=started,
        finished_at=started + timedelta(minutes=3),
    )
    waiting = submit_job(owner, project, name="waiting", command="python -c pass")
    JobScheduling.objects.create(
        job=waiting, queue_position=3, estimated_start_at=timezone.now() + timedelta(hours=1)
    )
    image = RuntimeImage.objects.create(
        tenant=project.tenant, name="pytorch", reference="registry.example/pt:2.3", registry="registry.example",
        repository="pt", tag="2.3",
    )
    JobImage.objects.create(job=waiting, image=image, reference=image.reference, digest="sha256:" + "a" * 64)
    JobImage.objects.create(job=plain, image=None, reference="gone/image:1", digest="")
    return [plain, done, waiting]


def test_fast_list_serializer_matches_the_declared_fields(jobs):
    rows = Job.objects.filter(pk__in=[j.pk for j in jobs]).values(*JOB_LIST_COLUMNS)
    assert len(rows) == 3
    for row in rows:
        job = Job.objects.get(pk=row["id"])
        assert JobListSerializer(row).data == GenericListSerializer(job).data
        with timezone.override("America/St_Johns"):  # UTC-3:30: offsets written as DRF does
            assert JobListSerializer(row).data == GenericListSerializer(job).data


def test_job_list_reads_what_it_shows_in_a_fixed_number_of_queries(
    jobs, owner, django_assert_max_num_queries
):
    api = APIClient()
    api.force_authenticate(owner)
    # roles (2), visible project ids, count, page: the same for 3 rows as for 300
    with django_assert_max_num_queries(6) as queries:
        body = api.get("/api/v1/jobs/?page_size=50").json()
    # The count and the page's ids read the jobs table alone (its covering index on
    # PostgreSQL); only the page's 50 rows are joined to projects, users and images.
    count = next(q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"])
    page = next(q["sql"] for q in queries.captured_queries if "images_jobimage" in q["sql"])
    assert "JOIN" not in count
    assert "JOIN" not in page[page.index("IN (SELECT") :].split(")")[0]
    by_id = {row["id"]: row for row in body["results"]}
    assert set(by_id) == {j.pk for j in jobs}
    waiting = by_id[jobs[2].pk]
    assert waiting["image_digest"] == "sha256:" + "a" * 64 and waiting["queue_position"] == 3
    assert by_id[jobs[0].pk]["image"] is None and by_id[jobs[0].pk]["image_reference"] == "gone/image:1"
    assert by_id[jobs[1].pk]["finished_at"].endswith("Z") and by_id[jobs[1].pk]["name"] == "done ✓"
    assert waiting["url"] == f"/jobs/{jobs[2].pk}/"


def test_a_jobs_metrics_page_through_the_same_pagination(jobs, owner):
    """The viewset's pagination makes plain rows for the job list only; a job's metrics
    come through it as points."""
    from jobs.models import MetricPoint

    job = jobs[0]
    MetricPoint.objects.bulk_create(
        MetricPoint(job=job, worker=0, seq=step, name=name, step=step, value=step / 10, ts=timezone.now())
        for step in range(3)
        for name in ("loss", "accuracy")
    )
    api = APIClient()
    api.force_authenticate(owner)
    body = api.get(f"/api/v1/jobs/{job.pk}/metrics/?name=loss&page_size=2").json()
    assert body["count"] == 3
    assert [(p["name"], p["step"], p["value"]) for p in body["results"]] == [("loss", 0, 0.0), ("loss", 1, 0.1)]


def test_a_project_tokens_job_list_costs_what_a_sessions_does(
    jobs, owner, project, django_assert_max_num_queries
):
    """The token's narrowing is one more condition on the same query, not a query per row."""
    from accounts import services as account_services
    from projects import services as project_services

    audio = project_services.create_project(actor=owner, tenant=project.tenant, name="Audio", slug="audio")
    for n in range(30):
        submit_job(owner, audio, name=f"audio-{n}", command="python -c pass")
    token, key = account_services.create_api_token(actor=owner, name="vision", scope="read", project=project)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    api.get("/api/v1/jobs/")  # the token's first use writes its last use
    # token, roles (2), visible project ids, count, page
    with django_assert_max_num_queries(6):
        body = api.get("/api/v1/jobs/?page_size=50").json()
    assert body["count"] == 3 and {row["project"] for row in body["results"]} == {project.pk}
