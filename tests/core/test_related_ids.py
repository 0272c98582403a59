"""Ids named in API bodies cannot be probed: another tenant's id answers exactly like one
that does not exist.

Each case is a write the outsider (owner of lab-b) may attempt, naming one of lab-a's
rows in a body field. The same write naming an id nobody has used must get the same
status and the same body, the id itself aside. Serializer fields answer 400 (they look
ids up through core.api.VisibleRelatedField); ids read by the view answer 404 through
get_object_for_user. A row the caller sees but may not use is still 403
(tests/jobs/test_submit.py::test_member_may_not_submit and the like).
"""

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.models import Tenant
from datasets.models import Dataset, DatasetVersion
from datasets.services.catalog import create_dataset
from images import services as image_services
from images.models import RuntimeImage
from jobs.models import Job
from jobs.services.submit import submit_job
from modelhub import services as hub_services
from modelhub.models import RegisteredModel
from projects.models import Project
from tests.datasets.builders import access_objects as dataset_objects
from tests.modelhub.builders import FAKE_REGISTRY, safetensors_bytes
from tests.modelhub.builders import access_objects as hub_objects

pytestmark = pytest.mark.django_db

NEVER_USED = 987_654


@pytest.fixture
def rows(owner, outsider, tenant, project, other_tenant, other_project):
    """lab-a's rows (the outsider's targets) and lab-b's own rows to write into."""
    lab_a = {
        Tenant: tenant,
        Project: project,
        Job: submit_job(owner, project, name="a", command="python -c pass"),
        **hub_objects(tenant, project, owner),
        **dataset_objects(tenant, project, owner),
    }
    model = hub_services.create_model(outsider, other_project, name="speech")
    own = {
        "tenant": other_tenant,
        "project": other_project,
        "dataset": create_dataset(outsider, other_project, name="Own", slug="own"),
        "model": model,
        "version": hub_services.upload_version(
            outsider, model, [("model.safetensors", SimpleUploadedFile("m", safetensors_bytes()))]
        ),
        "image": image_services.create_image(
            outsider, other_tenant, name="own", reference=f"{FAKE_REGISTRY}/lab-b/base:1"
        ),
    }
    return lab_a, own


# (endpoint, field, model of the id, request builder: (own rows, id) -> (method, url, body))
CASES = [
    (
        "jobs",
        "project",
        Project,
        lambda own, ref: ("post", "/api/v1/jobs/", {"project": ref, "command": "python x.py"}),
    ),
    (
        "jobs",
        "image",
        RuntimeImage,
        lambda own, ref: (
            "post",
            "/api/v1/jobs/",
            {"project": own["project"].pk, "command": "python x.py", "image": ref},
        ),
    ),
    (
        "projects",
        "tenant",
        Tenant,
        lambda own, ref: ("post", "/api/v1/projects/", {"tenant": ref, "name": "X", "slug": "x"}),
    ),
    (
        "project-members",
        "project",
        Project,
        lambda own, ref: (
            "post",
            "/api/v1/project-members/",
            {"project": ref, "user": "oscar", "role": "viewer"},
        ),
    ),
    (
        "memberships",
        "tenant",
        Tenant,
        lambda own, ref: ("post", "/api/v1/memberships/", {"tenant": ref, "user": "oscar"}),
    ),
    (
        "tokens",
        "project",
        Project,
        lambda own, ref: ("post", "/api/v1/tokens/", {"name": "probe", "project": ref}),
    ),
    (
        "datasets",
        "project",
        Project,
        lambda own, ref: ("post", "/api/v1/datasets/", {"project": ref, "name": "D", "slug": "d"}),
    ),
    (
        "images",
        "tenant",
        Tenant,
        lambda own, ref: (
            "post",
            "/api/v1/images/",
            {"tenant": ref, "name": "i", "reference": f"{FAKE_REGISTRY}/x/y:1"},
        ),
    ),
    (
        "image-builds",
        "tenant",
        Tenant,
        lambda own, ref: (
            "post",
            "/api/v1/image-builds/",
            {"tenant": ref, "base": own["image"].pk, "name": "b"},
        ),
    ),
    (
        "image-builds",
        "base",
        RuntimeImage,
        lambda own, ref: (
            "post",
            "/api/v1/image-builds/",
            {"tenant": own["tenant"].pk, "base": ref, "name": "b"},
        ),
    ),
    (
        "models",
        "project",
        Project,
        lambda own, ref: ("post", "/api/v1/models/", {"project": ref, "name": "m"}),
    ),
    (
        "models (patch)",
        "project",
        Project,
        lambda own, ref: ("patch", f"/api/v1/models/{own['model'].pk}/", {"project": ref}),
    ),
    (
        "model-versions",
        "model",
        RegisteredModel,
        lambda own, ref: ("post", "/api/v1/model-versions/", {"model": ref}),
    ),
    (
        "model-versions",
        "job",
        Job,
        lambda own, ref: ("post", "/api/v1/model-versions/", {"job": ref}),
    ),
    (
        "model-versions predict",
        "image",
        RuntimeImage,
        lambda own, ref: (
            "post",
            f"/api/v1/model-versions/{own['version'].pk}/predict/",
            {"command": "python predict.py", "image": ref},
        ),
    ),
    (
        "uploads",
        "dataset",
        Dataset,
        lambda own, ref: (
            "post",
            "/api/v1/uploads/",
            {"dataset": ref, "files": [{"path": "a", "size": 1}]},
        ),
    ),
    (
        "datasets copy",
        "source",
        DatasetVersion,
        lambda own, ref: ("post", f"/api/v1/datasets/{own['dataset'].pk}/copy/", {"source": ref}),
    ),
    (
        "datasets from-job",
        "job",
        Job,
        lambda own, ref: ("post", f"/api/v1/datasets/{own['dataset'].pk}/from-job/", {"job": ref}),
    ),
]


def answer(api, request, ref):
    """Status and body, with the id named in the request made anonymous."""
    method, url, body = request
    response = getattr(api, method)(url, body, format="json")
    text = re.sub(rf"(?<!\d){ref}(?!\d)", "<id>", response.content.decode())
    return response.status_code, text


@pytest.mark.parametrize("endpoint,field,model,build", CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
def test_a_foreign_id_answers_like_a_missing_one(
    rows, api_for, outsider, endpoint, field, model, build
):
    lab_a, own = rows
    foreign = lab_a[model].pk
    assert not model.objects.filter(pk=NEVER_USED).exists()
    api = api_for(outsider)

    foreign_answer = answer(api, build(own, foreign), foreign)
    missing_answer = answer(api, build(own, NEVER_USED), NEVER_USED)

    assert foreign_answer == missing_answer
    status, body = foreign_answer
    assert status in (400, 404), body
    if status == 400:
        # Nothing else in the request was wrong: the id alone was refused.
        assert list(json.loads(body)) == [field], body


def test_the_field_error_reads_like_drf_own(rows, api_for, outsider):
    """The message a client already knows for a missing id, now for a foreign one too."""
    lab_a, _ = rows
    response = api_for(outsider).post(
        "/api/v1/datasets/",
        {"project": lab_a[Project].pk, "name": "D", "slug": "d"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json() == {
        "project": [f'Invalid pk "{lab_a[Project].pk}" - object does not exist.']
    }


def test_a_visible_id_passes_the_field_and_meets_the_permission_check(api_for, member, project):
    """The field narrows to what the user sees; what they may do is still the matrix (403)."""
    response = api_for(member).post(
        "/api/v1/datasets/", {"project": project.pk, "name": "D", "slug": "d"}, format="json"
    )
    assert response.status_code == 403


def test_a_serializer_without_the_request_refuses_to_guess(project):
    from django.core.exceptions import ImproperlyConfigured

    from datasets.api import DatasetSerializer

    serializer = DatasetSerializer(data={"project": project.pk, "name": "D", "slug": "d"})
    with pytest.raises(ImproperlyConfigured, match="needs the request"):
        serializer.is_valid()


@pytest.mark.parametrize("url", ["/api/v1/datasets/", "/api/v1/projects/", "/api/v1/tokens/"])
def test_browsable_api_forms_offer_only_visible_rows(client, outsider, project, other_project, url):
    """The HTML form's choices come from the same field: no other tenant's names in it."""
    client.force_login(outsider)
    page = client.get(url, HTTP_ACCEPT="text/html").content.decode()
    assert "lab-b" in page
    assert "lab-a" not in page and "Lab A" not in page
