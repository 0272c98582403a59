"""The register-from-job form (issue 27 item 5): each output file is a real checkbox with
its path and size, and the description typed there shows on the version's pages."""

import re

import pytest
from django.urls import reverse

from modelhub import services
from modelhub.models import ModelVersion
from tests.modelhub.test_modelhub import finished_job

pytestmark = pytest.mark.django_db


def test_each_file_is_a_checkbox_with_its_path_and_size(project, owner, client_for):
    job = finished_job(owner, project, files={"model.pt": b"w" * 3000, "meta.json": b"{}"})
    body = client_for(owner).get(reverse("modelhub:register_from_job", args=[job.pk])).content.decode()
    boxes = re.findall(r'<input type="checkbox" name="paths"[^>]*>', body)
    assert len(boxes) == 2
    # A checkbox, not a text field styled as one (the "empty pills").
    assert all('class="form-check-input"' in box and "form-control" not in box for box in boxes)
    files = body[body.index('id="register-files"') :]
    assert re.search(r"<code>model\.pt</code> <span[^>]*>2\.9 KiB</span>", files)
    assert re.search(r"<code>meta\.json</code> <span[^>]*>2 B</span>", files)


def test_the_description_typed_there_shows_on_the_version_page(project, owner, member, client_for):
    job = finished_job(owner, project)
    client = client_for(owner)
    response = client.post(
        reverse("modelhub:register_from_job", args=[job.pk]),
        {"model_name": "digits", "paths": ["model.pt"], "description": "CNN, 3 epochs, lr 0.01"},
    )
    version = ModelVersion.objects.get(model__name="digits")
    assert response.status_code == 302 and response.url == version.get_absolute_url()
    assert list(version.files.values_list("path", flat=True)) == ["model.pt"]
    page = client_for(member).get(version.get_absolute_url()).content.decode()
    assert '<p id="version-description" class="mt-2 mb-0">CNN, 3 epochs, lr 0.01' in page
    assert "CNN, 3 epochs, lr 0.01" in client.get(version.model.get_absolute_url()).content.decode()


def test_a_file_the_job_does_not_have_is_refused_and_nothing_is_registered(project, owner, client_for):
    job = finished_job(owner, project)
    response = client_for(owner).post(
        reverse("modelhub:register_from_job", args=[job.pk]),
        {"model_name": "digits", "paths": ["../etc/passwd"]},
    )
    assert response.status_code == 400
    assert "not one of the available choices" in response.content.decode()
    assert not ModelVersion.objects.exists()


def test_compared_versions_show_metrics_with_four_significant_digits(project, owner, client_for):
    first = finished_job(owner, project, metrics=[("accuracy", 0.9123456789012345)])
    second = finished_job(owner, project, metrics=[("accuracy", 0.95)])
    for job in (first, second):
        version = services.register_version_from_job(owner, job, model_name="digits")
    body = client_for(owner).get(
        reverse("modelhub:model_compare", args=[version.model_id]), {"a": 1, "b": 2}
    ).content.decode()
    assert 'title="0.9123456789012345">0.9123</td>' in body
    assert "0.9123456789012345</td>" not in body
