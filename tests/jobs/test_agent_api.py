"""The agent API as a whole: every route mounted under /api/v1/executor/ (read from the URL
configuration, so a route added tomorrow is covered) takes a job token and nothing else."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from jobs.models import Job
from jobs.services.launch import make_token
from jobs.services.submit import submit_job
from jobs.states import transition

PREFIX = "api/v1/executor/"
SAMPLE = {"<int:job_id>": None, "<int:pk>": "1", "<path:path>": "out/x.txt", "<str:sha256>": "0" * 64}


@pytest.fixture(autouse=True)
def _settings(job_settings):
    pass


def executor_routes() -> list[str]:
    found = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                found.append(prefix + str(p.pattern))

    walk(get_resolver().url_patterns, "")
    return sorted(r for r in found if r.startswith(PREFIX))


def concrete(route: str, job: Job) -> str:
    for placeholder, value in SAMPLE.items():
        route = route.replace(placeholder, str(job.pk) if value is None else value)
    assert "<" not in route, f"give {route} a sample value in SAMPLE"
    return "/" + route


def answers(client, url, **headers) -> set[int]:
    """The status of each method the route takes (405s left out)."""
    codes = {getattr(client, m)(url, **headers).status_code for m in ("get", "post", "put")}
    return codes - {405}


def running_job(owner, project, secret):
    job = submit_job(owner, project, command="python x.py")
    transition(job, "admitted", "test")
    transition(job, "starting", "test", token_hash=Job.hash_token(secret))
    return job


def test_the_walk_finds_the_agent_routes():
    routes = executor_routes()
    for expected in ("jobs/<int:job_id>/spec", "jobs/<int:job_id>/dataset-files/<int:pk>"):
        assert PREFIX + expected in routes
    assert PREFIX + "model-files/<int:pk>" in routes


def test_every_agent_route_refuses_a_request_without_a_job_token(client, owner, project):
    job = running_job(owner, project, "s3cret")
    for route in executor_routes():
        url = concrete(route, job)
        assert answers(client, url) == {401}, url
        # A personal session is not a job token either.
        client.force_login(owner)
        assert answers(client, url) == {401}, url
        client.logout()


def test_a_token_of_another_job_reaches_nothing(client, owner, project, outsider, other_project):
    job = running_job(owner, project, "mine")
    running_job(outsider, other_project, "theirs")
    theirs = {"HTTP_AUTHORIZATION": f"Bearer {make_token(0, 'theirs')}"}
    for route in executor_routes():
        if "<int:job_id>" in route:
            url = concrete(route, job)
            assert answers(client, url, **theirs) == {404}, url
