"""Runtime images: the catalog, registering and resolving against a real registry, jobs that
pin a digest, custom builds that push a new image, and the pages and API over them."""

import base64
import gzip
import hashlib
import io
import tarfile
import zipfile

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.models import AuditEvent
from images import services
from images.models import BuildState, ImageBuild, RuntimeImage
from images.registry import RegistryClient
from images.tasks import run_build
from jobs.models import JobImage
from jobs.services.submit import submit_job
from tests.registry import PASSWORD, USERNAME

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(db):
    services.seed_catalog()  # the data migration's rows are gone after a transactional test
    return RuntimeImage.objects.filter(tenant=None)


@pytest.fixture
def base_image(use_registry, tenant, owner, settings):
    """A tiny image with no root filesystem to run: its builds take the registry-only path
    (buildah's path, on a real image, is in test_real_builds.py)."""
    settings.GANTRY_IMAGE_BUILDER = "registry"
    use_registry.push_tiny_image("lab-a/base", "1", labels={"org.gantry.framework": "custom"})
    return services.create_image(
        owner,
        tenant,
        name="base",
        reference=f"{use_registry.host}/lab-a/base:1",
        python_version="3.11",
        resolve=True,
    )


def client_for_registry(registry):
    return RegistryClient(registry.url, USERNAME, PASSWORD)


# --- the catalog --------------------------------------------------------------------------


def test_catalog_has_pytorch_tensorflow_and_legacy_mxnet(catalog):
    by_framework = {image.framework: image for image in catalog}
    assert set(by_framework) >= {"pytorch", "tensorflow", "mxnet"}
    assert by_framework["mxnet"].legacy and by_framework["mxnet"].framework_version == "1.9.1"
    assert not by_framework["pytorch"].legacy
    assert services.seed_catalog() == 0  # idempotent


def test_public_images_are_visible_to_every_tenant_but_changed_by_nobody(catalog, owner, outsider):
    image = catalog.get(framework="pytorch")
    for user in (owner, outsider):
        assert RuntimeImage.objects.visible_to(user).filter(pk=image.pk).exists()
        with pytest.raises(PermissionDenied):
            services.update_image(user, image, description="mine now")


def test_tenant_images_are_invisible_to_outsiders(tenant, owner, outsider, client_for):
    image = services.create_image(owner, tenant, name="lab", reference="reg.example/lab-a/x:1")
    assert not RuntimeImage.objects.visible_to(outsider).filter(pk=image.pk).exists()
    assert client_for(outsider).get(image.get_absolute_url()).status_code == 404


def test_member_cannot_change_or_delete_a_tenant_image(tenant, owner, member):
    image = services.create_image(owner, tenant, name="lab", reference="reg.example/lab-a/x:1")
    with pytest.raises(PermissionDenied):
        services.update_image(member, image, name="other")
    with pytest.raises(PermissionDenied):
        services.delete_image(member, image)


# --- registering and resolving ------------------------------------------------------------


def test_an_unparseable_reference_is_refused_and_nothing_is_created(tenant, owner):
    with pytest.raises(ValidationError) as info:
        services.create_image(owner, tenant, name="bad", reference="Reg.Example/UPPER:tag")
    assert "uppercase" in str(info.value.message_dict["reference"])
    assert not RuntimeImage.objects.filter(name="bad").exists()


def test_registering_with_resolve_pins_the_digest_and_labels(base_image, use_registry):
    assert base_image.digest == use_registry.skopeo_digest("lab-a/base", "1")
    assert base_image.labels == {"org.gantry.framework": "custom"}
    assert base_image.resolved_at is not None


def test_an_image_missing_from_the_registry_is_refused(use_registry, tenant, owner):
    with pytest.raises(ValidationError, match="Not found in the registry"):
        services.create_image(
            owner,
            tenant,
            name="ghost",
            reference=f"{use_registry.host}/lab-a/ghost:1",
            resolve=True,
        )
    assert not RuntimeImage.objects.filter(name="ghost").exists()


def test_registry_auth_failure_is_a_clear_error(use_registry, settings, tenant, owner):
    use_registry.push_tiny_image("lab-a/authcheck", "1")
    settings.GANTRY_REGISTRY_PASSWORD = "wrong"
    with pytest.raises(ValidationError, match="refused access as 'gantry'"):
        services.create_image(
            owner,
            tenant,
            name="x",
            reference=f"{use_registry.host}/lab-a/authcheck:1",
            resolve=True,
        )


def test_resolve_follows_a_moved_tag(base_image, use_registry, owner):
    before = base_image.digest
    use_registry.push_tiny_image("lab-a/base", "1", labels={"moved": "yes"})
    services.resolve_image(owner, base_image)
    assert base_image.digest != before
    assert base_image.digest == use_registry.skopeo_digest("lab-a/base", "1")
    assert AuditEvent.objects.filter(action="image.resolve", object_id=str(base_image.pk)).exists()


def test_delete_from_registry_removes_the_manifest(use_registry, tenant, owner):
    use_registry.push_tiny_image("lab-a/gone", "1")
    image = services.create_image(
        owner, tenant, name="gone", reference=f"{use_registry.host}/lab-a/gone:1", resolve=True
    )
    services.delete_image(owner, image, from_registry=True)
    assert not RuntimeImage.objects.filter(pk=image.pk).exists()
    with client_for_registry(use_registry) as client:
        assert client.tags("lab-a/gone") == []


# --- jobs -----------------------------------------------------------------------------------


def test_a_job_records_the_digest_it_runs_with(base_image, project, owner):
    job = submit_job(owner, project, image=base_image, command="python -c pass")
    record = JobImage.objects.get(job=job)
    assert record.digest == base_image.digest and record.image == base_image


def test_a_local_env_image_gives_the_job_its_runtime(tenant, project, owner):
    import sys

    image = services.create_image(
        owner, tenant, name="venv", reference="reg.example/lab-a/v:1", local_env=sys.executable
    )
    job = submit_job(owner, project, image=image, command="python -c pass")
    assert job.runtime == sys.executable


def test_an_outsider_cannot_run_a_tenant_image(tenant, owner, outsider, other_project):
    image = services.create_image(owner, tenant, name="lab", reference="reg.example/lab-a/x:1")
    with pytest.raises(ValidationError, match="No such image"):
        submit_job(outsider, other_project, image=image, command="python -c pass")


# --- custom builds ----------------------------------------------------------------------------


def _wheel(directory):
    """A pure-Python wheel, so the build's pip runs offline."""
    name = "gantryhello-1.0-py3-none-any.whl"
    files = {
        "gantryhello/__init__.py": b"GREETING = 'hello from a custom image'\n",
        "gantryhello-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: gantryhello\nVersion: 1.0\n",
        "gantryhello-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += "gantryhello-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / name, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr("gantryhello-1.0.dist-info/RECORD", record)


def _layer_files(client, repository, digest):
    manifest = client.manifest(repository, digest)
    blob = client.blob(repository, manifest.layers[-1]["digest"])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_custom_build_pushes_a_new_image_the_client_can_resolve(
    base_image, tenant, owner, settings, tmp_path
):
    _wheel(tmp_path)
    settings.GANTRY_PIP_NO_INDEX = True
    settings.GANTRY_PIP_FIND_LINKS = str(tmp_path)
    build = services.start_build(
        owner,
        base_image,
        tenant,
        name="with hello",
        tag="v1",
        requirements="gantryhello==1.0",
        files=[("/opt/app/train.py", io.BytesIO(b"print('train')\n"))],
    )
    assert build.state == BuildState.QUEUED
    assert run_build(build.pk) == "succeeded"
    build.refresh_from_db()
    assert build.progress == 100 and "pushed" in build.log
    image = build.result
    assert image.tenant == tenant and image.built_from == base_image
    assert image.reference == f"{settings.GANTRY_REGISTRY_URL[7:]}/lab-a/with-hello:v1"
    with RegistryClient(settings.GANTRY_REGISTRY_URL, USERNAME, PASSWORD) as client:
        assert client.resolve("lab-a/with-hello", "v1") == image.digest
        config = client.config("lab-a/with-hello", image.digest)
        files = _layer_files(client, "lab-a/with-hello", image.digest)
        base_layers = client.manifest("lab-a/base", base_image.digest).layers
        new_layers = client.manifest("lab-a/with-hello", image.digest).layers
    assert "PYTHONPATH=/opt/gantry/python" in config["config"]["Env"]
    assert config["config"]["Labels"]["org.opencontainers.image.base.digest"] == base_image.digest
    assert len(config["rootfs"]["diff_ids"]) == len(new_layers) == len(base_layers) + 1
    assert files["opt/app/train.py"] == b"print('train')\n"
    assert b"hello from a custom image" in files["opt/gantry/python/gantryhello/__init__.py"]


def test_a_build_with_a_package_pip_cannot_install_fails_with_its_log(
    base_image, tenant, owner, settings, tmp_path
):
    settings.GANTRY_PIP_NO_INDEX = True
    settings.GANTRY_PIP_FIND_LINKS = str(tmp_path)
    build = services.start_build(
        owner, base_image, tenant, name="broken", requirements="numpy==2.4.6"
    )
    assert run_build(build.pk) == "failed"
    build.refresh_from_db()
    assert build.state == BuildState.FAILED
    assert "pure-Python" in build.error and "pip install" in build.log
    assert not RuntimeImage.objects.filter(name="broken").exists()
    # The failure is in the audit log, with its reason (written through images.services).
    failed = AuditEvent.objects.get(action="image.build_failed", object_id=str(build.pk))
    assert failed.actor_name == "system" and "pure-Python" in failed.details["error"]
    assert run_build(build.pk) == "not queued"  # a build runs once


@pytest.mark.parametrize(
    "requirements,files,message",
    [
        ("-e /etc", [], "not a package requirement"),
        ("https://evil.example/x.whl", [], "not a package requirement"),
        ("", [], "at least one file"),
        ("", [("relative.txt", b"x")], "absolute path"),
        ("", [("/opt/../etc/passwd", b"x")], "not a usable path"),
        ("", [("/proc/x", b"x")], "/proc"),
    ],
)
def test_bad_build_input_is_refused_before_anything_is_queued(
    base_image, tenant, owner, requirements, files, message
):
    with pytest.raises(ValidationError, match=message):
        services.start_build(
            owner,
            base_image,
            tenant,
            name="bad",
            requirements=requirements,
            files=[(p, io.BytesIO(d)) for p, d in files],
        )
    assert not ImageBuild.objects.exists()


def test_an_outsider_cannot_build_into_a_tenant(base_image, tenant, outsider):
    with pytest.raises(PermissionDenied):
        services.start_build(outsider, base_image, tenant, name="x", requirements="a")


# --- pages and API ----------------------------------------------------------------------------


def test_the_image_page_shows_registry_tags_and_labels(base_image, client_for, member):
    response = client_for(member).get(base_image.get_absolute_url())
    assert response.status_code == 200
    body = response.content.decode()
    assert base_image.digest in body and "org.gantry.framework=custom" in body


def test_the_catalog_page_lists_public_and_own_images(catalog, base_image, client_for, outsider):
    body = client_for(outsider).get(reverse("images:image_list")).content.decode()
    assert "PyTorch 2.7" in body and "legacy" in body
    assert "lab-a/base" not in body


def test_the_add_form_shows_a_bad_reference_and_creates_nothing(tenant, owner, client_for):
    response = client_for(owner).post(
        reverse("images:image_add", args=[tenant.pk]),
        {"name": "x", "reference": "not a reference", "framework": "custom"},
    )
    assert response.status_code == 400
    assert "no spaces" in response.content.decode()
    assert not RuntimeImage.objects.filter(name="x").exists()


def test_the_registry_page_shows_only_the_users_namespaces(
    base_image, use_registry, client_for, owner, outsider
):
    use_registry.push_tiny_image("lab-b/secret", "1")
    assert "lab-b/secret" not in client_for(owner).get(reverse("images:registry")).content.decode()
    page = client_for(owner).get(reverse("images:registry"), {"repository": "lab-a/base"})
    assert base_image.digest in page.content.decode()


def test_the_build_page_shows_progress_and_log(base_image, tenant, owner, client_for):
    response = client_for(owner).post(
        reverse("images:build_add", args=[base_image.pk]),
        {
            "tenant": tenant.pk,
            "name": "page build",
            "tag": "p1",
            "directory": "/opt/app",
            "files": [SimpleUploadedFile("hello.txt", b"hi")],
        },
    )
    build = ImageBuild.objects.get(name="page build")
    assert response.status_code == 302 and response.url == build.get_absolute_url()
    run_build(build.pk)
    page = client_for(owner).get(build.get_absolute_url(), HTTP_HX_REQUEST="true")
    assert "Succeeded" in page.content.decode() and "100%" in page.content.decode()


def test_api_creates_resolves_and_deletes_images(use_registry, tenant, owner, api_for):
    use_registry.push_tiny_image("lab-a/api", "1")
    api = api_for(owner)
    created = api.post(
        "/api/v1/images/",
        {"tenant": tenant.pk, "name": "api", "reference": f"{use_registry.host}/lab-a/api:1"},
        format="json",
    )
    assert created.status_code == 201 and created.json()["digest"] == ""
    pk = created.json()["id"]
    resolved = api.post(f"/api/v1/images/{pk}/resolve/")
    assert resolved.json()["digest"] == use_registry.skopeo_digest("lab-a/api", "1")
    registry = api.get(f"/api/v1/images/{pk}/registry/").json()
    assert registry["available"] and registry["tags"] == ["1"]
    bad = api.post(
        "/api/v1/images/", {"tenant": tenant.pk, "name": "b", "reference": "x::y"}, format="json"
    )
    assert bad.status_code == 400 and "reference" in bad.json()
    assert api.delete(f"/api/v1/images/{pk}/?from_registry=true").status_code == 204


def test_api_build_returns_the_queued_build(base_image, tenant, owner, api_for):
    response = api_for(owner).post(
        "/api/v1/image-builds/",
        {"tenant": tenant.pk, "base": base_image.pk, "name": "api build", "requirements": "six"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["state"] == "queued"
    assert "/lab-a/api-build:" in response.json()["target"]


@pytest.mark.parametrize("builder,says", [("buildah", "with buildah"), ("registry", "py3-none-any")])
def test_the_build_form_says_which_builder_will_build(
    base_image, owner, client_for, settings, builder, says
):
    settings.GANTRY_IMAGE_BUILDER = builder
    body = client_for(owner).get(reverse("images:build_add", args=[base_image.pk])).content.decode()
    assert says in body


def test_auto_picks_buildah_only_where_it_can_build(settings, monkeypatch):
    """Builds with buildah are rootful: a worker that is not root takes the registry-only
    path rather than failing on buildah's storage; "buildah" forces it."""
    import shutil

    from images import buildah

    settings.GANTRY_IMAGE_BUILDER = "auto"
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(buildah.os, "geteuid", lambda: 0)
    assert buildah.available()
    monkeypatch.setattr(buildah.os, "geteuid", lambda: 1000)
    assert not buildah.available()
    settings.GANTRY_IMAGE_BUILDER = "buildah"
    assert buildah.available()
    settings.GANTRY_IMAGE_BUILDER = "auto"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(buildah.os, "geteuid", lambda: 0)
    assert not buildah.available()
