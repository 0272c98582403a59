"""The world every probe runs in (built once per module, rolled back at its end), and
what every probe runs with. What the probes check, and which module holds which:
__init__.py."""

from __future__ import annotations

import hashlib
import io
import json
import logging

import pytest
from django.db import transaction
from django.test import override_settings

from accounts import services as account_services
from accounts.models import Membership
from datasets.services.catalog import create_dataset
from datasets.services.uploads import start_upload
from jobs.models import Job
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from notifications.services import create_subscription
from projects import services as project_services
from projects.models import ProjectMember
from tests.datasets.builders import upload_files
from tests.hostile.world import SWEEP_DOC
from tests.modelhub.builders import FAKE_REGISTRY, access_objects, safetensors_bytes

# --- the world every probe runs in --------------------------------------------------------


def _finished_job(owner, project):
    """A succeeded job with two output files, as if its executor had reported them."""
    job = submit_job(owner, project, name="trained", command="python train.py")
    for path, data in {"model.safetensors": safetensors_bytes(), "meta.json": b"{}"}.items():
        store_artifact(
            job, 0, path, io.BytesIO(data), hashlib.sha256(data).hexdigest()
        )
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    job.refresh_from_db()
    return job


def _build_world() -> dict:
    """Lab A (owner olivia, members max and nina) with one of everything a URL can name;
    lab B (owner oscar) with a dataset and an image of its own."""
    from django.contrib.auth import get_user_model

    from images import services as image_services

    users = {
        name: get_user_model().objects.create_user(
            username=name, password=f"pw-{name}", email=f"{name}@example.org"
        )
        for name in ("olivia", "max", "nina", "oscar")
    }
    owner, outsider = users["olivia"], users["oscar"]
    tenant = account_services.create_tenant(actor=owner, name="Lab A", slug="lab-a")
    for name in ("max", "nina"):
        account_services.TENANT_MEMBERS.add(actor=owner, place=tenant, user=users[name], role="member")
    other_tenant = account_services.create_tenant(actor=outsider, name="Lab B", slug="lab-b")
    project = project_services.create_project(
        actor=owner, tenant=tenant, name="Vision", slug="vision"
    )
    other_project = project_services.create_project(
        actor=outsider, tenant=other_tenant, name="Speech", slug="speech"
    )
    project_services.add_project_member(
        actor=owner, project=project, user=users["max"], role="viewer"
    )
    objects = {k.__name__: v for k, v in access_objects(tenant, project, owner).items()}
    dataset = create_dataset(owner, project, name="Digits", slug="digits")
    committed = upload_files(owner, dataset, {"train.csv": b"a,b\n1,2\n"})
    other_dataset = create_dataset(
        outsider, other_project, name="Theirs", slug="theirs"
    )
    upload_files(outsider, other_dataset, {"secret.csv": b"s\n"})
    return {
        "owner": owner,
        "member": users["max"],
        "nina": users["nina"],
        "outsider": outsider,
        "tenant": tenant,
        "other_tenant": other_tenant,
        "project": project,
        "other_project": other_project,
        "dataset": dataset,
        "dataset_version": committed.version,
        "other_dataset": other_dataset,
        "upload": start_upload(
            owner, dataset, files=[{"path": "more.txt", "size": 4}]
        ),
        "job": submit_job(owner, project, name="queued", command="python -c pass"),
        "finished_job": _finished_job(owner, project),
        "membership": Membership.objects.get(tenant=tenant, user=users["max"]),
        "project_member": ProjectMember.objects.get(project=project, user=users["max"]),
        "image": objects["RuntimeImage"],
        "other_image": image_services.create_image(
            outsider, other_tenant, name="theirs", reference=f"{FAKE_REGISTRY}/lab-b/img:1"
        ),
        "model": objects["RegisteredModel"],
        # Nothing listens on port 9: its test message is refused at once.
        "subscription": create_subscription(
            owner, project=project, name="ci", channel="webhook", url="http://127.0.0.1:9/h",
            events=["job.failed"],
        )[0],
        "model_version": objects["ModelVersion"],
        "sweep": _sweep(owner, project),
        "endpoint": _endpoint(project, owner),
        "snapshot": _pending_snapshot(owner, project),
    }


def _pending_snapshot(owner, project):
    from snapshots.services import create_snapshot

    files = [{"path": "train.py", "size": 5, "sha256": hashlib.sha256(b"probe").hexdigest()}]
    return create_snapshot(owner, project, files)[0]


def _endpoint(project, owner):
    from endpoints.models import Endpoint
    from tests.endpoints.builders import access_objects as endpoint_objects

    return endpoint_objects(project, owner)[Endpoint]


def _sweep(owner, project):
    from sweeps.services import create_sweep

    return create_sweep(owner, project, json.dumps(SWEEP_DOC))


@pytest.fixture(scope="module")
def _world_once(django_db_setup, django_db_blocker):
    """The world is built once for the module, in a transaction rolled back at its end;
    each test runs in a savepoint inside it (as Django's setUpTestData does), and each
    probe in a savepoint inside that."""
    hashers = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with django_db_blocker.unblock(), override_settings(PASSWORD_HASHERS=hashers):
        outer = transaction.atomic()
        outer.__enter__()
        try:
            world = _build_world()
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    yield world
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        outer.__exit__(None, None, None)


@pytest.fixture
def world(_world_once, db):
    for obj in _world_once.values():
        obj.refresh_from_db()
    return dict(_world_once)


@pytest.fixture(autouse=True)
def _quiet_request_log():
    """Thousands of refusals are expected here; the warning for each is noise."""
    logger = logging.getLogger("django.request")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _registry_nothing_listens_on(settings):
    # Builds are only queued here, never run; resolving fails fast.
    settings.GANTRY_REGISTRY_URL = f"http://{FAKE_REGISTRY}"
