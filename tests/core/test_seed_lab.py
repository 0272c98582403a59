import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.models import Tenant
from jobs.models import Job

pytestmark = pytest.mark.django_db


def test_seed_lab_makes_data_that_signs_in(tmp_path, client):
    credentials = tmp_path / "credentials.txt"
    call_command("seed_lab", tenants=3, projects=6, users=9, jobs=60, datasets=0, tokens_file=str(credentials))
    assert Tenant.objects.count() == 3 and Job.objects.count() == 60
    username, token, session, projects = credentials.read_text().splitlines()[0].split()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/v1/jobs/").json()["count"] > 0
    client.cookies["sessionid"] = session
    assert client.get(f"/projects/{projects.split(',')[0]}/").status_code == 200


def test_healthz_needs_nothing(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/healthz").json() == {"status": "ok"}
