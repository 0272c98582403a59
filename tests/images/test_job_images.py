"""Jobs that pick an image: the submit form and the API, the digest they record, the job page
and API showing it, and the refusals (bad id, another tenant's image, resolution failures)."""

import sys

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from core.ports import free_port
from images import services
from images.models import RuntimeImage
from jobs.models import Job, JobImage
from jobs.services.submit import clone_job, submit_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _small_machine(settings, tmp_path):
    from jobs.compute import reset_backends

    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    settings.GANTRY_LOCAL_CPUS = 4
    settings.GANTRY_LOCAL_MEMORY_MB = 8192
    reset_backends()
    yield
    reset_backends()


@pytest.fixture
def pushed_image(use_registry, tenant, owner):
    use_registry.push_tiny_image("lab-a/job-base", "1")
    return services.create_image(
        owner, tenant, name="job-base", reference=f"{use_registry.host}/lab-a/job-base:1"
    )


def _form(**extra):
    return {
        "kind": "train",
        "command": "python x.py",
        "gpus": 0,
        "cpus": 1,
        "memory_mb": 512,
        "max_retries": 0,
        "priority": 0,
        **extra,
    }


# --- the form -------------------------------------------------------------------------------


def test_the_form_offers_public_and_own_tenant_images_only(
    client_for, owner, outsider, tenant, other_tenant, project
):
    services.seed_catalog()
    own = services.create_image(owner, tenant, name="ours", reference="reg.example/lab-a/o:1")
    theirs = services.create_image(
        outsider, other_tenant, name="theirs", reference="reg.example/lab-b/t:1"
    )
    response = client_for(owner).get(reverse("jobs:job_add", args=[project.pk]) + "?kind=notebook")
    choices = {c.instance.pk for c, _ in response.context["form"].fields["image"].choices if c}
    assert own.pk in choices and theirs.pk not in choices
    assert set(RuntimeImage.objects.filter(tenant=None).values_list("pk", flat=True)) <= choices


def test_form_submit_with_an_image_records_the_resolved_digest(
    client_for, owner, project, pushed_image, use_registry
):
    client = client_for(owner)
    response = client.post(reverse("jobs:job_add", args=[project.pk]), _form(image=pushed_image.pk))
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == job.get_absolute_url()
    digest = use_registry.skopeo_digest("lab-a/job-base", "1")
    assert job.image_record.digest == digest and job.image_record.image == pushed_image
    assert job.image_reference == f"{use_registry.host}/lab-a/job-base@{digest}"

    page = client.get(job.get_absolute_url()).content.decode()
    assert digest in page and pushed_image.reference in page
    # No local environment on the local backend: allowed, and the page says what it ran with.
    assert "ran with Gantry&#x27;s own Python" in page


def test_the_form_refuses_another_tenants_image_without_naming_it(
    client_for, owner, outsider, other_tenant, project
):
    theirs = services.create_image(
        outsider, other_tenant, name="secret-theirs", reference="reg.example/lab-b/t:1"
    )
    response = client_for(owner).post(
        reverse("jobs:job_add", args=[project.pk]), _form(image=theirs.pk)
    )
    assert response.status_code == 400
    assert response.context["form"].errors["image"]
    assert "secret-theirs" not in response.content.decode()
    assert not Job.objects.exists()


def test_an_unresolvable_tag_is_a_field_error_and_creates_nothing(
    client_for, owner, tenant, project, use_registry
):
    missing = services.create_image(
        owner, tenant, name="gone", reference=f"{use_registry.host}/lab-a/never-pushed:1"
    )
    response = client_for(owner).post(
        reverse("jobs:job_add", args=[project.pk]), _form(image=missing.pk)
    )
    assert response.status_code == 400
    assert "never-pushed" in " ".join(response.context["form"].errors["image"])
    assert not Job.objects.exists() and not JobImage.objects.exists()


def test_registry_auth_failure_is_a_field_error(settings, owner, project, pushed_image):
    settings.GANTRY_REGISTRY_PASSWORD = "wrong"
    with pytest.raises(ValidationError) as caught:
        submit_job(owner, project, command="python x.py", image=pushed_image)
    assert "image" in caught.value.message_dict
    assert not Job.objects.exists()


def test_an_unreachable_registry_is_a_field_error(settings, owner, tenant, project):
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings.GANTRY_REGISTRY_URL = f"http://{host}"
    settings.GANTRY_REGISTRY_TIMEOUT_SECONDS = 5
    image = services.create_image(owner, tenant, name="away", reference=f"{host}/lab-a/x:1")
    with pytest.raises(ValidationError) as caught:
        submit_job(owner, project, command="python x.py", image=image)
    assert "image" in caught.value.message_dict
    assert not Job.objects.exists()


def test_a_local_env_image_runs_without_a_note_and_clone_keeps_it(
    client_for, owner, tenant, project
):
    image = services.create_image(
        owner, tenant, name="venv", reference="reg.example/lab-a/v:1", local_env=sys.executable
    )
    job = submit_job(owner, project, command="python x.py", image=image)
    assert job.runtime == sys.executable and job.image_record.runtime_note == ""
    # The clone form starts from the same image and a blank runtime (the image supplies it).
    form = client_for(owner).get(reverse("jobs:job_clone", args=[job.pk])).context["form"]
    assert form.initial["image"] == image.pk and form.initial["runtime"] == ""
    copy = clone_job(owner, job)
    assert copy.image_record.image == image and copy.runtime == sys.executable


# --- the API --------------------------------------------------------------------------------


def test_api_submit_with_an_image_shows_reference_and_digest(
    api_for, owner, project, pushed_image, use_registry
):
    api = api_for(owner)
    response = api.post(
        "/api/v1/jobs/",
        {"project": project.pk, "command": "python x.py", "image": pushed_image.pk},
        format="json",
    )
    assert response.status_code == 201, response.content
    digest = use_registry.skopeo_digest("lab-a/job-base", "1")
    body = response.json()
    assert body["image"] == pushed_image.pk
    assert body["image_reference"] == pushed_image.reference and body["image_digest"] == digest
    detail = api.get(f"/api/v1/jobs/{body['id']}/").json()
    assert detail["image_digest"] == digest and detail["image_reference"] == pushed_image.reference
    plain = api.post("/api/v1/jobs/", {"project": project.pk, "command": "x"}, format="json")
    assert plain.status_code == 201 and plain.json()["image"] is None


def test_api_bad_and_foreign_image_ids_are_400_and_look_alike(
    api_for, owner, outsider, other_tenant, project
):
    theirs = services.create_image(
        outsider, other_tenant, name="secret-theirs", reference="reg.example/lab-b/t:1"
    )
    api = api_for(owner)
    answers = []
    for image in (999999, theirs.pk, "abc"):
        response = api.post(
            "/api/v1/jobs/",
            {"project": project.pk, "command": "python x.py", "image": image},
            format="json",
        )
        assert response.status_code == 400 and "image" in response.json()
        assert "secret-theirs" not in response.content.decode()
        answers.append(response.json()["image"])
    assert answers[0] == answers[1]
    assert not Job.objects.exists()


def test_the_job_list_api_stays_flat_with_images(
    api_for, owner, tenant, project, django_assert_max_num_queries
):
    image = services.create_image(
        owner, tenant, name="pinned", reference="reg.example/lab-a/p@sha256:" + "a" * 64
    )
    for i in range(2):
        submit_job(owner, project, command="python x.py", image=image if i else None)
    api = api_for(owner)
    with django_assert_max_num_queries(12) as small:
        assert api.get("/api/v1/jobs/").status_code == 200
    for i in range(20):
        submit_job(owner, project, command="python x.py", image=image if i else None)
    with django_assert_max_num_queries(len(small.captured_queries)):
        response = api.get("/api/v1/jobs/")
    results = response.json()["results"]
    assert len(results) == 22
    assert {r["image_digest"] for r in results} == {None, "sha256:" + "a" * 64}
    # A container backend pulls the image by the digest the job recorded.
    from jobs.compute.kubernetes.backend import image_of

    pinned = Job.objects.filter(image_record__isnull=False).first()
    assert image_of(pinned) == "reg.example/lab-a/p@sha256:" + "a" * 64
