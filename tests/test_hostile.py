"""Hostile inputs for every form and every API endpoint.

Oversized fields, wrong types, unicode edge cases, path traversal in file names and
archives, huge uploads and malformed job specs: each is answered with a clear 4xx and
changes nothing (no row in any table, no file in storage, no field of the object the
request named). A hostile value a field may legitimately hold (an emoji name, say) may
be accepted, and then must come back exactly as sent.

The API's write operations are read from the OpenAPI schema, and the pages that take a
POST from the URL configuration, so an endpoint or form added later fails
`test_every_write_endpoint_has_a_base_body` or `test_every_page_that_takes_a_post_is_probed`
until it is given valid values here; from then on it gets the whole treatment. Each
probe runs in a savepoint that is rolled back, so every probe starts from the same world.

The corpus is in tests/hostile/corpus.py. Not the full cross product: each field gets the
values that most surely break its kind of field, plus a slice of the rest that moves
along from one endpoint (or page) to the next, so that every value meets every kind of
field somewhere and the module stays quick.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest
from django.core.cache import cache
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client, override_settings
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from accounts import services as account_services
from accounts.models import Membership
from datasets.models import ArchiveImport, DatasetVersion
from datasets.services.catalog import create_dataset
from datasets.services.uploads import start_upload
from jobs.models import Job
from jobs.services.launch import make_token
from jobs.services.outputs import store_artifact
from jobs.services.submit import submit_job
from notifications.services import create_subscription
from projects import services as project_services
from projects.models import ProjectMember
from tests.datasets.builders import upload_files
from tests.hostile import state
from tests.hostile.corpus import (
    CORPUS,
    PATHS,
    Hostile,
    must_refuse,
    nested,
    round_trips,
    sample,
)
from tests.modelhub.builders import FAKE_REGISTRY, access_objects, safetensors_bytes

pytestmark = pytest.mark.django_db

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
COMPONENTS = SCHEMA["components"]["schemas"]
WRITE_METHODS = ("post", "put", "patch")


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
        account_services.add_member(actor=owner, tenant=tenant, user=users[name])
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
        "snapshot": _pending_snapshot(owner, project),
    }


def _pending_snapshot(owner, project):
    from snapshots.services import create_snapshot

    files = [{"path": "train.py", "size": 5, "sha256": hashlib.sha256(b"probe").hexdigest()}]
    return create_snapshot(owner, project, files)[0]


SWEEP_DOC = {
    "name": "probe sweep",
    "objective": "val_accuracy",
    "template": {"command": "python -c pass"},
    "parameters": {"lr": {"type": "loguniform", "low": 0.001, "high": 0.1}},
    "budget": {"trials": 2},
}


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


# --- one probe ----------------------------------------------------------------------------


@dataclass
class Outcome:
    status: int
    content: bytes = b""
    content_type: str = ""
    error: str = ""
    changes: list[str] = field(default_factory=list)

    def json(self):
        try:
            return json.loads(self.content)
        except ValueError:
            return None

    def show(self) -> str:
        if self.error:
            return f"raised {self.error}"
        return f"{self.status} {self.content[:200]!r}"


class _Rollback(Exception):
    pass


def probe(send, target=None) -> Outcome:
    """Send one request inside a savepoint; note what changed, then undo it, so the next
    probe starts from the same world (files written to storage are not undone: they show
    up as changes)."""
    cache.clear()  # throttles and sign-in limits count in the cache
    before = state.snapshot(target)
    outcome = None
    try:
        with transaction.atomic():
            try:
                response = send()
            except Exception as exc:  # the test client re-raises what the view raised
                outcome = Outcome(500, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                raise _Rollback from exc
            outcome = Outcome(
                response.status_code,
                b"".join(response) if response.streaming else response.content,
                response.get("Content-Type", ""),
            )
            outcome.changes = state.differences(before, state.snapshot(target))
            raise _Rollback
    except _Rollback:
        pass
    return outcome


def readable_message(body: Any) -> bool:
    """Somewhere in a JSON error body there is a sentence a person can read."""
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and re.search(r"[A-Za-z]{3}", item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def refusal_problems(outcome: Outcome) -> list[str]:
    """A refusal is a 4xx, in JSON, with a message, and leaves everything as it was."""
    problems = []
    if not 400 <= outcome.status < 500:
        problems.append(f"answered {outcome.show()}")
    elif "json" not in outcome.content_type or not readable_message(outcome.json()):
        problems.append(f"{outcome.status} without a JSON message: {outcome.content[:200]!r}")
    if outcome.changes:
        problems.append(f"changed {outcome.changes[:5]}")
    return problems


# --- the API: every write operation of the schema -----------------------------------------


def _resolve(schema: dict) -> dict:
    while "$ref" in schema:
        schema = COMPONENTS[schema["$ref"].rsplit("/", 1)[-1]]
    if "allOf" in schema:
        return _resolve(schema["allOf"][0])
    return schema


def _request_schema(operation: dict) -> tuple[dict, list[str]]:
    body = operation.get("requestBody")
    if not body:
        return {}, []
    content = body["content"]
    schema = _resolve(next(iter(content.values()))["schema"])
    properties = {
        name: {**_resolve(spec), **{k: v for k, v in spec.items() if k != "allOf"}}
        for name, spec in schema.get("properties", {}).items()
        if not spec.get("readOnly")
    }
    return properties, list(content)


WRITE_OPERATIONS = sorted(
    (method, path)
    for path, methods in SCHEMA["paths"].items()
    for method in methods
    if method in WRITE_METHODS
)


def _op_id(op) -> str:
    return f"{op[0].upper()} {op[1]}"


@dataclass(frozen=True)
class Base:
    """A body the endpoint accepts (`status`), and the world object `{id}` names.

    Where the endpoint cannot succeed here (S3-only steps, say) `status` is the
    refusal it answers with, so a hostile value is still checked against a known answer.
    """

    body: Any  # world -> dict
    target: str | None = None
    status: int = 201
    multipart: bool = False


BASES = {
    ("post", "/api/v1/tenants/"): Base(lambda w: {"name": "Probe lab", "slug": "probe-lab"}),
    ("put", "/api/v1/tenants/{id}/"): Base(
        lambda w: {"name": "Lab A", "slug": "lab-a", "description": "d"}, "tenant", 200
    ),
    ("patch", "/api/v1/tenants/{id}/"): Base(lambda w: {"description": "d"}, "tenant", 200),
    ("post", "/api/v1/memberships/"): Base(
        lambda w: {"tenant": w["tenant"].pk, "user": "oscar", "role": "member"}
    ),
    ("put", "/api/v1/memberships/{id}/"): Base(lambda w: {"role": "admin"}, "membership", 200),
    ("patch", "/api/v1/memberships/{id}/"): Base(lambda w: {"role": "admin"}, "membership", 200),
    ("post", "/api/v1/tokens/"): Base(lambda w: {"name": "probe", "scope": "read"}),
    ("post", "/api/v1/invitations/"): Base(
        lambda w: {"tenant": w["tenant"].pk, "email": "probe@example.org", "role": "member"}
    ),
    ("post", "/api/v1/projects/"): Base(
        lambda w: {
            "tenant": w["tenant"].pk,
            "name": "Probe",
            "slug": "probe",
            "description": "",
            "visibility": "tenant",
        }
    ),
    ("put", "/api/v1/projects/{id}/"): Base(
        lambda w: {
            "tenant": w["tenant"].pk,
            "name": "Vision",
            "slug": "vision",
            "description": "d",
            "visibility": "private",
        },
        "project",
        200,
    ),
    ("patch", "/api/v1/projects/{id}/"): Base(lambda w: {"name": "Vision 2"}, "project", 200),
    ("post", "/api/v1/project-members/"): Base(
        lambda w: {"project": w["project"].pk, "user": "nina", "role": "viewer"}
    ),
    ("put", "/api/v1/project-members/{id}/"): Base(
        lambda w: {"project": w["project"].pk, "user": "max", "role": "developer"},
        "project_member",
        200,
    ),
    ("patch", "/api/v1/project-members/{id}/"): Base(
        lambda w: {"role": "developer"}, "project_member", 200
    ),
    ("post", "/api/v1/datasets/"): Base(
        lambda w: {
            "project": w["project"].pk,
            "name": "Probe",
            "slug": "probe",
            "description": "d",
            "tags": ["a"],
            "licence": "MIT",
        }
    ),
    ("put", "/api/v1/datasets/{id}/"): Base(
        lambda w: {
            "project": w["project"].pk,
            "name": "Digits",
            "description": "d",
            "tags": ["b"],
            "licence": "MIT",
        },
        "dataset",
        200,
    ),
    ("patch", "/api/v1/datasets/{id}/"): Base(lambda w: {"name": "Digits 2"}, "dataset", 200),
    ("post", "/api/v1/datasets/{id}/copy/"): Base(
        lambda w: {"source": w["dataset_version"].pk, "message": "m"}, "dataset"
    ),
    ("post", "/api/v1/datasets/{id}/from-job/"): Base(
        lambda w: {"job": w["finished_job"].pk, "message": "m"}, "dataset"
    ),
    # Copying from the bucket needs S3 and an allowed prefix: refused here, by design.
    ("post", "/api/v1/datasets/{id}/import-prefix/"): Base(
        lambda w: {"prefix": "imports/probe/", "parent": "latest"}, "dataset", 400
    ),
    ("post", "/api/v1/datasets/{id}/archive/"): Base(
        lambda w: {"archive": _archive_upload(), "parent": "latest"}, "dataset", 202, True
    ),
    ("post", "/api/v1/uploads/"): Base(
        lambda w: {
            "dataset": w["dataset"].pk,
            "files": [{"path": "probe.txt", "size": 4}],
            "message": "m",
        }
    ),
    ("post", "/api/v1/uploads/{id}/abort/"): Base(lambda w: {}, "upload", 200),
    ("post", "/api/v1/uploads/{id}/commit/"): Base(lambda w: {}, "upload", 400),
    # S3-only steps: the filesystem backend refuses them.
    ("post", "/api/v1/uploads/{id}/sign/"): Base(
        lambda w: {"file": w["upload"].files.get().pk, "numbers": [1]}, "upload", 400
    ),
    ("post", "/api/v1/uploads/{id}/complete-part/"): Base(
        lambda w: {"file": w["upload"].files.get().pk, "number": 1, "sha256": "0" * 64},
        "upload",
        400,
    ),
    # The raw-bytes part upload has its own tests below (test_part_upload_*).
    ("put", "/api/v1/uploads/{id}/part/"): Base(lambda w: {}, "upload", 400),
    ("post", "/api/v1/jobs/"): Base(
        lambda w: {"project": w["project"].pk, "name": "probe", "command": "python -c pass"}
    ),
    ("post", "/api/v1/jobs/{id}/cancel/"): Base(lambda w: {}, "job", 200),
    ("post", "/api/v1/jobs/{id}/retry/"): Base(lambda w: {}, "finished_job", 201),
    ("post", "/api/v1/images/"): Base(
        lambda w: {
            "tenant": w["tenant"].pk,
            "name": "probe image",
            "reference": f"{FAKE_REGISTRY}/lab-a/probe:1",
        }
    ),
    ("patch", "/api/v1/images/{id}/"): Base(lambda w: {"name": "lab base 2"}, "image", 200),
    ("post", "/api/v1/images/{id}/resolve/"): Base(lambda w: {}, "image", 400),
    ("post", "/api/v1/image-builds/"): Base(
        lambda w: {
            "tenant": w["tenant"].pk,
            "base": w["image"].pk,
            "name": "probe build",
            "requirements": "requests==2.32.0",
        }
    ),
    ("post", "/api/v1/models/"): Base(
        lambda w: {
            "project": w["project"].pk,
            "name": "probe model",
            "description": "d",
            "card": "# Probe",
            "tags": ["a"],
        }
    ),
    ("patch", "/api/v1/models/{id}/"): Base(lambda w: {"description": "d2"}, "model", 200),
    ("post", "/api/v1/models/{id}/alias/"): Base(
        lambda w: {"name": "production", "version": 1}, "model", 200
    ),
    ("post", "/api/v1/model-versions/"): Base(
        lambda w: {"job": w["finished_job"].pk, "model": w["model"].pk, "description": "d"}
    ),
    ("post", "/api/v1/model-versions/{id}/predict/"): Base(
        lambda w: {"command": "python predict.py", "gpus": 0}, "model_version"
    ),
    ("post", "/api/v1/sweeps/"): Base(lambda w: {"project": w["project"].pk, "spec": SWEEP_DOC}),
    ("post", "/api/v1/sweeps/{id}/stop/"): Base(lambda w: {}, "sweep", 200),
    ("post", "/api/v1/notification-subscriptions/"): Base(
        lambda w: {
            "project": w["project"].pk,
            "name": "probe hook",
            "channel": "webhook",
            "url": "https://hooks.example.org/probe",
            "events": ["job.failed"],
        }
    ),
    ("patch", "/api/v1/notification-subscriptions/{id}/"): Base(
        lambda w: {"name": "ci 2", "events": ["job.failed", "job.lost"]}, "subscription", 200
    ),
    ("post", "/api/v1/notification-subscriptions/{id}/test/"): Base(
        lambda w: {}, "subscription", 200
    ),
    ("post", "/api/v1/snapshots/"): Base(
        lambda w: {
            "project": w["project"].pk,
            "files": [{"path": "probe.py", "size": 3, "sha256": "0" * 64, "mode": 420}],
            "git": {"commit": "ab" * 20, "dirty": False, "branch": "main"},
        }
    ),
    # The raw bytes of one content: tests/snapshots/test_api.py sends good and bad ones;
    # here the path's {sha256} is no sha256.
    ("put", "/api/v1/snapshots/{id}/blobs/{sha256}/"): Base(lambda w: {}, "snapshot", 400),
    ("post", "/api/v1/snapshots/{id}/finalize/"): Base(lambda w: {}, "snapshot", 400),
    # Many contents in one tar: a JSON body is no tar (test_api.py sends real ones).
    ("post", "/api/v1/snapshots/{id}/blobs/"): Base(lambda w: {}, "snapshot", 400),
}


def _archive_upload(members: dict[str, bytes] | None = None, name="probe.zip"):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for member, data in (members or {"a.txt": b"a"}).items():
            zf.writestr(member, data)
    return SimpleUploadedFile(name, buffer.getvalue(), content_type="application/zip")


def _url(w, path: str, base: Base) -> str:
    if "{id}" not in path:
        return path
    return path.replace("{id}", str(w[base.target].pk))


def _json_text(body: dict, override: tuple[str, Hostile] | None = None) -> str:
    """A JSON object with one member's value replaced by a hostile fragment."""
    members = {k: json.dumps(v) for k, v in body.items()}
    if override is not None:
        members[override[0]] = override[1].fragment()
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in members.items()) + "}"


def _api(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def _send_json(api, method, url, text, content_type="application/json"):
    return lambda: api.generic(method.upper(), url, text, content_type=content_type)


def test_every_write_endpoint_has_a_base_body():
    missing = [_op_id(op) for op in WRITE_OPERATIONS if op not in BASES]
    assert not missing, f"give these endpoints a valid body in BASES: {missing}"
    stale = [_op_id(op) for op in BASES if op not in WRITE_OPERATIONS]
    assert not stale, f"no longer in the schema: {stale}"


@pytest.mark.parametrize("op", WRITE_OPERATIONS, ids=_op_id)
def test_base_body_gets_its_known_answer(op, world):
    """The control for every probe below: without the hostile value the body is accepted,
    so a refusal there is the hostile value's doing."""
    method, path = op
    base = BASES[op]
    api = _api(world["owner"])
    url = _url(world, path, base)
    body = base.body(world)
    if base.multipart:
        send = lambda: getattr(api, method)(url, body, format="multipart")  # noqa: E731
    else:
        send = _send_json(api, method, url, _json_text(body))
    outcome = probe(send)
    assert outcome.status == base.status, f"{_op_id(op)}: {outcome.show()}"


def _api_field_problems(w, op, name: str, spec: dict, hostile: Hostile) -> list[str]:
    method, path = op
    base = BASES[op]
    api = _api(w["owner"])
    url = _url(w, path, base)
    body = base.body(w)
    target = w[base.target] if base.target else None
    if base.multipart:
        if hostile.raw is not None:
            return []  # a form field carries text only
        data = {**body, name: hostile.form_text}
        if spec.get("format") == "binary":
            data[name] = hostile.form_text  # text where a file belongs
        outcome = probe(lambda: getattr(api, method)(url, data, format="multipart"), target)
        refuse = spec.get("format") == "binary" or hostile.unstorable or "\x00" in hostile.form_text
    else:
        outcome = probe(_send_json(api, method, url, _json_text(body, (name, hostile))), target)
        refuse = must_refuse(hostile, spec)
    if outcome.status >= 500:
        return [f"{name}={hostile.id}: {outcome.show()}"]
    if 200 <= outcome.status < 300:
        if refuse:
            return [f"{name}={hostile.id}: accepted ({outcome.show()})"]
        stored = (outcome.json() or {}).get(name) if isinstance(outcome.json(), dict) else None
        if stored is not None and not round_trips(hostile.value, stored):
            return [f"{name}={hostile.id}: stored as {stored!r:.80}"]
        return []
    return [f"{name}={hostile.id}: {p}" for p in refusal_problems(outcome)]


API_SLICE = 20  # corpus values per endpoint, besides each field's own ALWAYS values


@pytest.mark.parametrize("op", WRITE_OPERATIONS, ids=_op_id)
def test_hostile_field_values_are_refused_or_kept_exactly(op, world):
    operation = SCHEMA["paths"][op[1]][op[0]]
    fields, _ = _request_schema(operation)
    problems = []
    slice_at = WRITE_OPERATIONS.index(op) * API_SLICE
    for name, values in sample(fields, slice_at, API_SLICE).items():
        for hostile in values:
            problems += _api_field_problems(world, op, name, fields[name], hostile)
    assert not problems, f"{_op_id(op)}:\n" + "\n".join(problems)


def _problems_of_answer(outcome: Outcome, refuse: bool, what: str) -> list[str]:
    if outcome.status >= 500:
        return [f"{what}: {outcome.show()}"]
    if refuse or not 200 <= outcome.status < 300:
        return [f"{what}: {p}" for p in refusal_problems(outcome)]
    return []


# --- whole bodies: malformed, mistyped, too deep, too large -------------------------------

BODY_OPERATIONS = [
    op for op in WRITE_OPERATIONS if _request_schema(SCHEMA["paths"][op[1]][op[0]])[0]
]
HOSTILE_BODIES = {
    "malformed-json": ("application/json", b"{not json"),
    "truncated-json": ("application/json", b'{"name": "probe"'),
    "array-body": ("application/json", b"[1, 2]"),
    "string-body": ("application/json", b'"probe"'),
    "null-body": ("application/json", b"null"),
    "nested-100k": ("application/json", b"[" * 100_000 + b"]" * 100_000),
    "nested-65": ("application/json", json.dumps({"name": nested(65)}).encode()),
    "invalid-utf8": ("application/json", b'{"name": "\xff\xfe probe"}'),
    "lone-surrogate-key": ("application/json", b'{"\\udfff": 1}'),
    "nan-literal": ("application/json", b'{"name": NaN}'),
    "huge-number": ("application/json", b'{"name": ' + b"9" * 5000 + b"}"),
    "xml": ("application/xml", b"<probe/>"),
    "text": ("text/plain", b"probe"),
    "no-boundary": ("multipart/form-data", b"--x\r\nprobe"),
}


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=_op_id)
def test_hostile_bodies_are_refused(op, world):
    method, path = op
    base = BASES[op]
    api = _api(world["owner"])
    url = _url(world, path, base)
    target = world[base.target] if base.target else None
    problems = []
    for name, (content_type, body) in HOSTILE_BODIES.items():
        outcome = probe(_send_json(api, method, url, body, content_type), target)
        problems += _problems_of_answer(outcome, True, name)
    assert not problems, f"{_op_id(op)}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "op",
    [("post", "/api/v1/jobs/"), ("post", "/api/v1/uploads/"), ("patch", "/api/v1/projects/{id}/")],
    ids=_op_id,
)
def test_a_json_body_over_the_upload_limit_is_refused_with_413(op, world, settings):
    """DATA_UPLOAD_MAX_MEMORY_SIZE bounds JSON bodies as it bounds forms (lowered here to
    keep the test small, rather than sending megabytes)."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    method, path = op
    base = BASES[op]
    body = {**base.body(world), "description": "x" * 20_000}
    target = world[base.target] if base.target else None
    outcome = probe(
        _send_json(_api(world["owner"]), method, _url(world, path, base), _json_text(body)), target
    )
    assert outcome.status == 413, outcome.show()
    assert not refusal_problems(outcome)
    # Just under the limit is fine: the limit is the body's size, nothing else.
    body["description"] = "x" * 100
    outcome = probe(
        _send_json(_api(world["owner"]), method, _url(world, path, base), _json_text(body)), target
    )
    assert outcome.status == base.status, outcome.show()


def test_a_form_body_over_the_upload_limit_is_refused(world, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    api = _api(world["owner"])
    body = f"name=probe&slug=probe&description={'x' * 20_000}"
    outcome = probe(
        _send_json(api, "post", "/api/v1/tenants/", body, "application/x-www-form-urlencoded")
    )
    assert outcome.status == 413, outcome.show()
    assert not refusal_problems(outcome)


# --- malformed job specs ------------------------------------------------------------------

MIB = "x" * 1_000_000


def _bad_job_specs(w) -> dict[str, dict]:
    other_version = DatasetVersion.objects.filter(dataset=w["other_dataset"]).get()
    return {
        "env-list": {"env": ["A=1"]},
        "env-empty-list": {"env": []},
        "env-string": {"env": "A=1"},
        "env-false": {"env": False},
        "env-value-object": {"env": {"A": {"b": 1}}},
        "env-value-list": {"env": {"A": [1]}},
        "env-value-null": {"env": {"A": None}},
        "env-value-nul": {"env": {"A": "x\x00y"}},
        "env-value-1mb": {"env": {"A": MIB}},
        "env-name-with-equals": {"env": {"A=B": "1"}},
        "env-name-with-nul": {"env": {"A\x00B": "1"}},
        "env-name-trailing-newline": {"env": {"A\n": "1"}},
        "env-name-empty": {"env": {"": "1"}},
        "env-name-digit-first": {"env": {"1A": "1"}},
        "env-name-unicode": {"env": {"ÄPFEL": "1"}},
        "env-name-gantry": {"env": {"GANTRY_JOB_TOKEN": "mine"}},
        "parameters-list": {"parameters": [1, 2]},
        "parameters-string": {"parameters": "lr=1"},
        "parameters-zero": {"parameters": 0},
        "parameters-nested-10": {"parameters": {"lr": nested(10)}},
        "parameters-value-object": {"parameters": {"lr": {"a": 1}}},
        "parameters-value-null": {"parameters": {"lr": None}},
        "parameters-value-nul": {"parameters": {"lr": "x\x00"}},
        "parameters-value-1mb": {"parameters": {"lr": MIB}},
        "parameters-name-trailing-newline": {"parameters": {"lr\n": 1}},
        "parameters-name-dashes": {"parameters": {"--lr": 1}},
        "parameters-name-space": {"parameters": {"l r": 1}},
        "inputs-object": {"inputs": {"dataset": "digits"}},
        "inputs-string": {"inputs": "digits"},
        "inputs-deep": {"inputs": nested(50)},
        "inputs-other-tenants-dataset": {"inputs": [{"dataset": w["other_dataset"].pk}]},
        "inputs-other-tenants-slug": {"inputs": [{"dataset": "theirs"}]},
        "inputs-other-tenants-version": {"inputs": [{"dataset_version": other_version.pk}]},
        "inputs-nonexistent-dataset": {"inputs": [{"dataset": 999_999}]},
        "inputs-nonexistent-version": {"inputs": [{"dataset_version": 999_999}]},
        "inputs-dataset-true": {"inputs": [{"dataset": True}]},
        "inputs-version-true": {"inputs": [{"dataset_version": True}]},
        "inputs-version-float": {"inputs": [{"dataset_version": w["dataset_version"].pk + 0.5}]},
        "inputs-version-huge": {"inputs": [{"dataset": "digits", "version": 10**30}]},
        "inputs-version-word": {"inputs": [{"dataset": "digits", "version": "abc"}]},
        "inputs-mount-dotdot": {"inputs": [{"dataset": "digits", "mount": "../../etc"}]},
        "inputs-mount-nul": {"inputs": [{"dataset": "digits", "mount": "data\x00"}]},
        "inputs-mount-twice": {
            "inputs": [{"dataset": "digits", "mount": "d"}, {"dataset": "digits", "mount": "d"}]
        },
        "inputs-listed-dotdot": {
            "inputs": [{"mount": "m", "files": [{"path": "../../x", "url": "/x", "size": 1}]}]
        },
        "inputs-listed-absolute-mount": {
            "inputs": [{"mount": "/etc", "files": [{"path": "passwd", "url": "/x", "size": 1}]}]
        },
        "inputs-listed-gantry-dir": {
            "inputs": [{"mount": ".gantry", "files": [{"path": "token", "url": "/x", "size": 1}]}]
        },
        "inputs-listed-nul": {
            "inputs": [{"mount": "m", "files": [{"path": "a\x00", "url": "/x", "size": 1}]}]
        },
        "inputs-listed-no-files": {"inputs": [{"mount": "m"}]},
        "gpus-negative": {"gpus": -1},
        "gpus-huge": {"gpus": 10**30},
        "cpus-zero": {"cpus": 0},
        "cpus-int32-max+1": {"cpus": 2**31},
        "memory-negative": {"memory_mb": -1},
        "memory-huge": {"memory_mb": 10**30},
        "workers-zero": {"workers": 0},
        "workers-huge": {"workers": 10**30},
        "workers-on-a-train-job": {"workers": 2},
        "timeout-zero": {"timeout_seconds": 0},
        "timeout-negative": {"timeout_seconds": -5},
        "timeout-int32-max+1": {"timeout_seconds": 2**31},
        "timeout-huge": {"timeout_seconds": 10**30},
        "retries-huge": {"max_retries": 10**30},
        "priority-huge": {"priority": 10**30},
        "command-1mb": {"command": "python " + MIB},
        "command-unbalanced-quote": {"command": "python 'train.py"},
        "command-blank": {"command": "   "},
        "command-list": {"command": ["python", "train.py"]},
        "kind-unknown": {"kind": "miner"},
        "outputs-dir-dotdot": {"outputs_dir": "../../etc"},
        "outputs-dir-backslash": {"outputs_dir": "out\\..\\.."},
        "image-of-another-tenant": {"image": w["other_image"].pk},
        "image-nonexistent": {"image": 999_999},
        "project-of-another-tenant": {"project": w["other_project"].pk},
    }


GOOD_JOB_SPECS = {
    "env-and-parameters": {"env": {"A_1": "x y", "B": 2}, "parameters": {"lr": 0.1, "n-layers": 3}},
    "own-dataset-input": {"inputs": [{"dataset": "digits", "version": 1, "mount": "data/d"}]},
    "unicode-name": {"name": "🚀 entraînement"},
    "timeout-a-day": {"timeout_seconds": 86_400},
    "long-command": {"command": "python train.py" + " --flag" * 1000},
}


def test_malformed_job_specs_are_refused(world):
    w = world
    api = _api(w["owner"])
    base = BASES[("post", "/api/v1/jobs/")].body(w)
    problems = []
    for name, override in _bad_job_specs(w).items():
        outcome = probe(_send_json(api, "post", "/api/v1/jobs/", _json_text({**base, **override})))
        problems += _problems_of_answer(outcome, True, name)
    assert not problems, "\n".join(problems)


def test_parameters_nested_1000_deep_are_refused(world):
    body = _json_text(BASES[("post", "/api/v1/jobs/")].body(world))
    body = body[:-1] + ', "parameters": {"lr": ' + "[" * 1000 + "]" * 1000 + "}}"
    outcome = probe(_send_json(_api(world["owner"]), "post", "/api/v1/jobs/", body))
    assert not refusal_problems(outcome), outcome.show()


def test_well_formed_job_specs_near_the_edges_are_accepted(world):
    """The other side of the validators above: what a user may mean is not refused."""
    w = world
    api = _api(w["owner"])
    base = BASES[("post", "/api/v1/jobs/")].body(w)
    for name, override in GOOD_JOB_SPECS.items():
        outcome = probe(_send_json(api, "post", "/api/v1/jobs/", _json_text({**base, **override})))
        assert outcome.status == 201, f"{name}: {outcome.show()}"
        for key, value in override.items():
            if key not in ("inputs", "env"):
                assert outcome.json()[key] == value, f"{name}: {key} came back changed"


PREDICT_FIELDS = {"command", "inputs", "parameters", "gpus", "image"}


def test_malformed_prediction_specs_are_refused(world):
    """Prediction jobs are job specs too, with the model's files staged first."""
    w = world
    api = _api(w["owner"])
    url = f"/api/v1/model-versions/{w['model_version'].pk}/predict/"
    base = BASES[("post", "/api/v1/model-versions/{id}/predict/")].body(w)
    problems = []
    for name, override in _bad_job_specs(w).items():
        if set(override) <= PREDICT_FIELDS:
            outcome = probe(_send_json(api, "post", url, _json_text({**base, **override})))
            problems += _problems_of_answer(outcome, True, name)
    assert not problems, "\n".join(problems)


# --- uploads: file names, archives, parts, sizes ------------------------------------------

BAD_UPLOAD_PATHS = [
    *(h.value for h in PATHS),
    "/abs/path",
    "./a",
    "a/./b",
    "a//b",
    "a/",
    ".gantry/token",
    "name\u202egnp.exe",  # a right-to-left override hides the real extension
    "zero\u200bwidth",
    "line\nbreak",
    "n" * 256,
    "/".join(["d" * 200] * 6),  # over 1024 bytes in all
    "é" * 200,  # 400 bytes: over 255 per name
]


def test_upload_file_names_that_escape_or_deceive_are_refused(world):
    api = _api(world["owner"])
    base = BASES[("post", "/api/v1/uploads/")].body(world)
    problems = []
    for path in BAD_UPLOAD_PATHS:
        for where, body in (
            ("files", {**base, "files": [{"path": path, "size": 4}]}),
            ("remove", {**base, "files": [], "remove": [path]}),
        ):
            outcome = probe(_send_json(api, "post", "/api/v1/uploads/", _json_text(body)))
            problems += _problems_of_answer(outcome, True, f"{where} {path!r:.60}")
    assert not problems, "\n".join(problems)


def test_upload_file_lists_that_make_no_sense_are_refused(world):
    api = _api(world["owner"])
    base = BASES[("post", "/api/v1/uploads/")].body(world)
    cases = {
        "size-negative": [{"path": "a", "size": -1}],
        "size-huge": [{"path": "a", "size": 10**30}],
        "size-float": [{"path": "a", "size": 1.5}],
        "size-missing": [{"path": "a"}],
        "sha256-not-hex": [{"path": "a", "size": 1, "sha256": "z" * 64}],
        "sha256-too-long": [{"path": "a", "size": 1, "sha256": "0" * 65}],
        "listed-twice": [{"path": "a", "size": 1}, {"path": "a", "size": 1}],
        "file-and-folder": [{"path": "a", "size": 1}, {"path": "a/b", "size": 1}],
        "entry-not-an-object": ["a"],
        "files-an-object": {"path": "a", "size": 1},
        "nothing-to-do": [],
    }
    problems = []
    for name, files in cases.items():
        outcome = probe(
            _send_json(api, "post", "/api/v1/uploads/", _json_text({**base, "files": files}))
        )
        problems += _problems_of_answer(outcome, True, name)
    outcome = probe(
        _send_json(api, "post", "/api/v1/uploads/", _json_text({**base, "parent": "../../1"}))
    )
    problems += _problems_of_answer(outcome, True, "parent")
    other = {**base, "dataset": world["other_dataset"].pk}
    outcome = probe(_send_json(api, "post", "/api/v1/uploads/", _json_text(other)))
    problems += _problems_of_answer(outcome, True, "another tenant's dataset")
    assert not problems, "\n".join(problems)


def test_an_upload_over_the_tenant_quota_is_refused_before_a_byte_moves(world, settings):
    settings.GANTRY_TENANT_STORAGE_QUOTA_GB = 0.000001  # about 1 KB
    body = {
        **BASES[("post", "/api/v1/uploads/")].body(world),
        "files": [{"path": "big", "size": 5000}],
    }
    outcome = probe(_send_json(_api(world["owner"]), "post", "/api/v1/uploads/", _json_text(body)))
    assert not refusal_problems(outcome), outcome.show()
    assert "storage" in outcome.content.decode()


def test_part_uploads_out_of_bounds_are_refused(world):
    upload = world["upload"]
    file = upload.files.get()  # 4 bytes: one part
    api = _api(world["owner"])
    url = f"/api/v1/uploads/{upload.pk}/part/"
    other = start_upload(
        world["outsider"], world["other_dataset"], files=[{"path": "x", "size": 4}]
    )
    good = b"data"
    cases = {
        "file-word": ("?file=abc&number=1", good, hashlib.sha256(good).hexdigest()),
        "file-other-session": (
            f"?file={other.files.get().pk}&number=1",
            good,
            hashlib.sha256(good).hexdigest(),
        ),
        "number-word": (f"?file={file.pk}&number=abc", good, hashlib.sha256(good).hexdigest()),
        "number-zero": (f"?file={file.pk}&number=0", good, hashlib.sha256(good).hexdigest()),
        "number-huge": (f"?file={file.pk}&number={10**30}", good, hashlib.sha256(good).hexdigest()),
        "number-two": (f"?file={file.pk}&number=2", good, hashlib.sha256(good).hexdigest()),
        "too-large": (
            f"?file={file.pk}&number=1",
            good * 1000,
            hashlib.sha256(good * 1000).hexdigest(),
        ),
        "too-small": (f"?file={file.pk}&number=1", b"da", hashlib.sha256(b"da").hexdigest()),
        "checksum-wrong": (f"?file={file.pk}&number=1", good, "0" * 64),
        "checksum-missing": (f"?file={file.pk}&number=1", good, ""),
        "checksum-nul": (f"?file={file.pk}&number=1", good, "\x00" * 64),
    }
    problems = []
    for name, (query, data, digest) in cases.items():
        outcome = probe(
            lambda q=query, d=data, h=digest: api.generic(
                "PUT", url + q, d, content_type="application/octet-stream", HTTP_X_PART_SHA256=h
            ),
            upload,
        )
        problems += _problems_of_answer(outcome, True, name)
    # The control: the right part is kept.
    outcome = probe(
        lambda: api.generic(
            "PUT",
            f"{url}?file={file.pk}&number=1",
            good,
            content_type="application/octet-stream",
            HTTP_X_PART_SHA256=hashlib.sha256(good).hexdigest(),
        )
    )
    assert outcome.status == 200, outcome.show()
    assert not problems, "\n".join(problems)


def _zip(
    members: dict[str, bytes], *, link: str | None = None, encrypted=False, method=None
) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            zf.writestr(info, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16
            zf.writestr(info, "/etc/passwd")
    data = buffer.getvalue()
    if encrypted:  # set the "encrypted" flag in the local and central headers
        data = data.replace(b"PK\x03\x04\x14\x00\x00\x00", b"PK\x03\x04\x14\x00\x01\x00", 1)
        data = data.replace(
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00", b"PK\x01\x02\x14\x03\x14\x00\x01\x00", 1
        )
    if method is not None:  # claim a compression method nothing implements
        data = data.replace(
            b"PK\x03\x04\x14\x00\x00\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x00" + method, 1
        )
        data = data.replace(
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00",
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00" + method,
            1,
        )
    return data


def _tar(members: dict[str, bytes], *, links=(), special=(), mode="w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target, kind in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tf.addfile(info)
        for name, kind in special:
            info = tarfile.TarInfo(name)
            info.type = kind
            tf.addfile(info)
    return buffer.getvalue()


HOSTILE_ARCHIVES = {
    "zip-dotdot": ("a.zip", _zip({"../evil": b"x"})),
    "zip-inner-dotdot": ("a.zip", _zip({"ok/../../evil": b"x"})),
    "zip-absolute": ("a.zip", _zip({"/abs/path": b"x"})),
    "zip-backslashes": ("a.zip", _zip({"..\\..\\evil": b"x"})),
    "zip-drive-letter": ("a.zip", _zip({"C:/evil": b"x"})),
    "zip-symlink": ("a.zip", _zip({"ok": b"x"}, link="evil")),
    "zip-control-chars": ("a.zip", _zip({"a\x1b[31m": b"x"})),
    "zip-rtl-override": ("a.zip", _zip({"a\u202etxt.exe": b"x"})),
    "zip-gantry-dir": ("a.zip", _zip({".gantry/token": b"x"})),
    "zip-twice": ("a.zip", _zip({"a": b"x", "./a": b"y"})),
    "zip-file-and-folder": ("a.zip", _zip({"a": b"x", "a/b": b"y"})),
    "zip-encrypted": ("a.zip", _zip({"a": b"x"}, encrypted=True)),
    "zip-unknown-compression": ("a.zip", _zip({"a": b"x"}, method=b"\x63\x00")),
    "zip-empty": ("a.zip", _zip({})),
    "zip-bomb": ("a.zip", None),  # built below: deflated zeros
    "tar-dotdot": ("a.tar", _tar({"../evil": b"x"}, mode="w")),
    "tar-dot-dotdot": ("a.tar", _tar({"./../evil": b"x"}, mode="w")),
    "tar-absolute": ("a.tar.gz", _tar({"/abs/path": b"x"})),
    "tar-symlink-out": (
        "a.tar.gz",
        _tar({"ok": b"x"}, links=[("l", "/etc/passwd", tarfile.SYMTYPE)]),
    ),
    "tar-hardlink-out": ("a.tgz", _tar({"ok": b"x"}, links=[("h", "../../x", tarfile.LNKTYPE)])),
    "tar-fifo": ("a.tar.gz", _tar({"ok": b"x"}, special=[("p", tarfile.FIFOTYPE)])),
    "tar-device": ("a.tar.gz", _tar({"ok": b"x"}, special=[("d", tarfile.CHRTYPE)])),
    "tar-truncated": ("a.tar", _tar({"a": b"x" * 5000}, mode="w")[:700]),
    "not-an-archive": ("a.zip", b"this is not an archive"),
    "wrong-suffix": ("a.exe", _zip({"a": b"x"})),
}


def _bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros", b"\0" * (4 * 1024 * 1024))
    return buffer.getvalue()


def _archive_problems(world, send_archive) -> list[str]:
    problems = []
    for name, (file_name, payload) in HOSTILE_ARCHIVES.items():
        payload = payload if payload is not None else _bomb()
        outcome = probe(lambda f=file_name, p=payload: send_archive(f, p), world["dataset"])
        problems += [f"{name}: {p}" for p in _archive_refusal_problems(outcome)]
    return problems


def _archive_refusal_problems(outcome: Outcome) -> list[str]:
    if "html" in outcome.content_type:  # the form page re-rendered with its error
        problems = [] if outcome.status in (200, 400) else [f"answered {outcome.show()}"]
        if "invalid-feedback" not in outcome.content.decode():
            problems.append("no error shown on the form")
        return problems + ([f"changed {outcome.changes[:5]}"] if outcome.changes else [])
    return refusal_problems(outcome)


def test_hostile_archives_are_refused_at_upload_through_the_api(world):
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"

    def send(file_name, payload):
        upload = SimpleUploadedFile(file_name, payload, content_type="application/octet-stream")
        return api.post(url, {"archive": upload, "parent": "latest"}, format="multipart")

    problems = _archive_problems(world, send)
    assert not problems, "\n".join(problems)


def test_hostile_archives_are_refused_at_upload_through_the_form(world, client):
    client.force_login(world["owner"])
    url = f"/datasets/{world['dataset'].pk}/archive/"

    def send(file_name, payload):
        return client.post(url, {"archive": SimpleUploadedFile(file_name, payload)})

    problems = _archive_problems(world, send)
    assert not problems, "\n".join(problems)


def test_a_good_archive_is_still_accepted_and_named_by_its_base_name(world):
    """The control for the archive tests, and the uploaded file's own name: a path in it
    is cut to its last part by Django before Gantry sees it, and never used as a path."""
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"
    for file_name in ("../../../evil.zip", "..\\..\\evil.zip", "/etc/evil.zip"):
        upload = SimpleUploadedFile(file_name, _zip({"a/b.txt": b"x"}))
        response = api.post(url, {"archive": upload}, format="multipart")
        assert response.status_code == 202, response.content
        archive = ArchiveImport.objects.get(pk=response.json()["id"])
        assert archive.file_name == "evil.zip"
        assert archive.staging_key.startswith("archives/")


def _multipart(fields: dict[str, str], file_field: str, file_name: str, payload: bytes):
    """A multipart body written by hand: the test client would clean the file name."""
    boundary = "hostile-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
        f'filename="{file_name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
        + payload
        + b"\r\n"
    )
    return b"".join(
        parts
    ) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_archive_upload_names_with_nothing_left_after_cleaning_are_refused(world):
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"
    problems = []
    for file_name in ("..", ".", "", "../..", "/"):
        body, content_type = _multipart({}, "archive", file_name, _zip({"a": b"x"}))
        outcome = probe(
            lambda b=body, c=content_type: api.generic("POST", url, b, content_type=c),
            world["dataset"],
        )
        problems += _problems_of_answer(outcome, True, repr(file_name))
    assert not problems, "\n".join(problems)


def test_a_nul_in_an_uploaded_file_name_never_reaches_storage(world):
    """Django drops the NUL from an uploaded file's name; whatever is accepted holds none."""
    api = _api(world["owner"])
    body, content_type = _multipart({}, "archive", "evil\x00.zip", _zip({"a": b"x"}))
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"
    response = api.generic("POST", url, body, content_type=content_type)
    assert response.status_code in (202, 400), response.content
    # (In Python: SQLite's LIKE stops at a NUL, so a __contains lookup would match anything.)
    assert all("\x00" not in a.file_name for a in ArchiveImport.objects.all())
    body, content_type = _multipart(
        {"model": str(world["model"].pk)}, "files", "a\x00b.safetensors", safetensors_bytes()
    )
    response = api.generic("POST", "/api/v1/model-versions/", body, content_type=content_type)
    assert response.status_code in (201, 400), response.content
    if response.status_code == 201:
        assert all("\x00" not in f["path"] for f in response.json()["files"])


def test_archives_over_the_limits_are_refused_at_upload(world, settings):
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"

    def send(payload):
        upload = SimpleUploadedFile("big.zip", payload)
        return probe(
            lambda: api.post(url, {"archive": upload}, format="multipart"), world["dataset"]
        )

    settings.GANTRY_ARCHIVE_MAX_BYTES = 1000  # unpacked
    outcome = send(_zip({"a": b"x" * 600, "b": b"y" * 600}))
    assert not refusal_problems(outcome), outcome.show()
    settings.GANTRY_ARCHIVE_MAX_BYTES = 10**9
    settings.GANTRY_ARCHIVE_MAX_FILES = 3
    outcome = send(_zip({f"f{i}": b"x" for i in range(4)}))
    assert not refusal_problems(outcome), outcome.show()
    settings.GANTRY_ARCHIVE_MAX_FILES = 100
    settings.GANTRY_TENANT_STORAGE_QUOTA_GB = 0.000001  # the archive itself is over the quota
    outcome = send(_zip({"a": bytes(range(256)) * 20}))
    assert not refusal_problems(outcome), outcome.show()


def test_image_build_files_over_the_size_limit_leave_nothing_behind(world, monkeypatch):
    from images import services as image_services

    monkeypatch.setattr(image_services, "MAX_BUILD_FILE_BYTES", 100)  # not a setting: 50 MB
    api = _api(world["owner"])
    body = {
        **BASES[("post", "/api/v1/image-builds/")].body(world),
        "files": [
            SimpleUploadedFile("small.txt", b"x" * 10),
            SimpleUploadedFile("big.bin", b"x" * 200),
        ],
    }
    outcome = probe(lambda: api.post("/api/v1/image-builds/", body, format="multipart"))
    assert not refusal_problems(outcome), outcome.show()


def test_uploaded_file_names_cannot_place_files_outside_their_folder(world):
    """Model files are named by the upload. Django keeps only the printable characters of
    a name's last part; what is left is refused when it is no file name, and a stored
    name is always one plain name."""
    api = _api(world["owner"])
    problems = []
    for file_name in (
        "..",
        ".",
        "../../../etc/evil.safetensors",
        "..\\..\\evil.safetensors",
        "\u202eevil.safetensors",
        "line\x1bbreak.safetensors",
    ):
        body, content_type = _multipart(
            {"model": str(world["model"].pk)}, "files", file_name, safetensors_bytes()
        )
        send = lambda b=body, c=content_type: api.generic(  # noqa: E731
            "POST", "/api/v1/model-versions/", b, content_type=c
        )
        outcome = probe(send)
        if outcome.status == 201:
            paths = [f["path"] for f in outcome.json()["files"]]
            if any("/" in p or "\\" in p or not p.isprintable() or p in (".", "..") for p in paths):
                problems.append(f"{file_name!r}: stored as {paths}")
            new = [c.removeprefix("new file ") for c in outcome.changes if c.startswith("new file")]
            stored = [default_storage.path(f"models/{world['model'].pk}") + "/" in p for p in new]
            if not new or not all(stored):
                problems.append(f"{file_name!r}: wrote {new}")
        else:
            problems += _problems_of_answer(outcome, True, repr(file_name))
    assert not problems, "\n".join(problems)


# --- forms: every server-rendered page that takes a POST ----------------------------------


class _FormReader(HTMLParser):
    """The fields of one POST form on a page (the one posting to `action`, "" for the
    page itself): their kind, limits and choices as rendered, and their default values."""

    def __init__(self, action: str):
        super().__init__()
        self.action = action
        self.inside = False
        self.select = self.textarea = None
        self.fields: dict[str, dict] = {}
        self.defaults: dict[str, Any] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.inside = (
                a.get("method", "").lower() == "post" and a.get("action", "") == self.action
            )
            return
        name = a.get("name")
        if not self.inside or not name or name == "csrfmiddlewaretoken":
            if tag == "option" and self.select:
                self._option(a)
            return
        spec = {
            "kind": a.get("type", "text") if tag == "input" else tag,
            "required": "required" in a,
            "disabled": "disabled" in a,  # Django ignores what is posted for it
            **{k: a[k] for k in ("maxlength", "min", "max", "step") if k in a},
        }
        if spec["kind"] in ("submit", "button", "file"):
            return
        if spec["kind"] in ("checkbox", "radio"):
            spec = self.fields.setdefault(name, {**spec, "options": []})
            spec["options"].append(a.get("value", "on"))
            if "checked" in a:
                self.defaults.setdefault(name, []).append(a.get("value", "on"))
            return
        self.fields[name] = spec
        if tag == "select":
            spec.update(options=[], multiple="multiple" in a)
            self.select = name
        elif tag == "textarea":
            self.textarea = name
            self.defaults[name] = ""
        else:
            self.defaults[name] = a.get("value", "")

    def _option(self, a):
        self.fields[self.select]["options"].append(a.get("value", ""))
        if "selected" in a:
            self.defaults[self.select] = a.get("value", "")
        self.defaults.setdefault(self.select, self.fields[self.select]["options"][0])

    def handle_data(self, data):
        if self.textarea:
            self.defaults[self.textarea] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.defaults[self.textarea] = self.defaults[self.textarea].removeprefix("\n")
            self.textarea = None


@dataclass(frozen=True)
class Page:
    """A page with a form: the world object its URL names, the values that make the form
    valid (None leaves a field out, as an unticked box), and where the form is shown."""

    target: str | None
    data: Any  # world -> dict
    query: str = ""
    shown_at: str | None = None  # the form is on another page (the tenant switcher)
    signed_in: bool = True
    free: tuple[str, ...] = ()  # fields any value of which may be accepted (see below)
    records: tuple[str, ...] = ()  # tables a refusal writes to on purpose


FORM_PAGES = {
    # A failed sign-in is recorded in the audit log, and counted by the lockout, on purpose.
    "login": Page(
        None,
        lambda w: {"username": "olivia", "password": "pw-olivia"},
        signed_in=False,
        free=("next",),
        records=("core_auditevent", "axes_accessattempt"),
    ),
    "accounts:tenant_add": Page(None, lambda w: {"name": "Probe lab", "slug": "probe-lab"}),
    "accounts:tenant_edit": Page("tenant", lambda w: {"name": "Lab A", "slug": "lab-a"}),
    "accounts:tenant_delete": Page("tenant", lambda w: {"confirm": "lab-a"}),
    "accounts:member_add": Page("tenant", lambda w: {"user": "oscar", "role": "member"}),
    "accounts:member_edit": Page("membership", lambda w: {"role": "admin"}),
    "accounts:token_list": Page(None, lambda w: {"name": "probe", "expires_in_days": "30"}),
    # The default project for bare MLflow names, a second form on the tokens page.
    "accounts:default_project": Page(
        None, lambda w: {"default_project": str(w["project"].pk)}, shown_at="/settings/tokens/"
    ),
    "accounts:invitation_add": Page(
        "tenant", lambda w: {"email": "probe@example.org", "role": "member", "days": "7"}
    ),
    # `next` is only where to go afterwards: anything but a path here leads home.
    "accounts:switch_tenant": Page(
        None, lambda w: {"tenant": str(w["tenant"].pk), "next": "/"}, shown_at="/", free=("next",)
    ),
    "projects:project_add": Page("tenant", lambda w: {"name": "Probe", "slug": "probe"}),
    "projects:project_edit": Page("project", lambda w: {"name": "Vision", "slug": "vision"}),
    "projects:project_delete": Page("project", lambda w: {"confirm": "vision"}),
    "projects:projectmember_add": Page(
        "project", lambda w: {"user": str(w["nina"].pk), "role": "developer"}
    ),
    "projects:projectmember_edit": Page("project_member", lambda w: {"role": "developer"}),
    # The hidden `kind` only picks which form to show; an unknown one shows the train form.
    "jobs:job_add": Page(
        "project",
        lambda w: {
            "name": "probe",
            "command": "python -c pass",
            "parameters": "lr=0.1",
            "env": "A=1",
        },
        free=("kind",),
    ),
    "jobs:job_add?kind=distributed": Page(
        "project",
        lambda w: {"name": "probe", "command": "python -c pass", "workers": "2"},
        query="?kind=distributed",
        free=("kind",),
    ),
    "jobs:job_add?kind=notebook": Page(
        "project", lambda w: {"name": "nb"}, query="?kind=notebook", free=("kind",)
    ),
    "jobs:job_clone": Page("finished_job", lambda w: {"name": "again"}, free=("kind",)),
    "datasets:dataset_add": Page(
        "project", lambda w: {"name": "Probe", "slug": "probe", "tags": "a, b", "licence": "MIT"}
    ),
    "datasets:dataset_edit": Page("dataset", lambda w: {"name": "Digits", "tags": "a"}),
    "datasets:dataset_delete": Page("dataset", lambda w: {"confirm": "digits"}),
    "datasets:dataset_from_job": Page(
        "dataset", lambda w: {"job": str(w["finished_job"].pk), "message": "m"}
    ),
    "images:image_add": Page(
        "tenant",
        lambda w: {
            "name": "probe image",
            "reference": f"{FAKE_REGISTRY}/lab-a/probe:1",
            "resolve": None,  # nothing listens at the registry
        },
    ),
    "images:image_edit": Page("image", lambda w: {"name": "lab base 2"}),
    "images:build_add": Page(
        "image", lambda w: {"name": "probe build", "requirements": "requests==2.32.0"}
    ),
    "modelhub:model_add": Page("project", lambda w: {"name": "probe model", "card": "# Probe"}),
    "modelhub:model_edit": Page("model", lambda w: {"name": "digits", "tags": "a, b"}),
    "modelhub:model_delete": Page("model", lambda w: {"confirm": "digits"}),
    "modelhub:alias_set": Page("model", lambda w: {"name": "production", "version": "1"}),
    "sweeps:sweep_add": Page("project", lambda w: {"source": json.dumps(SWEEP_DOC)}),
    "modelhub:register_from_job": Page("finished_job", lambda w: {"model_name": "probe model"}),
    "modelhub:version_predict": Page(
        "model_version", lambda w: {"command": "python predict.py", "inputs": "[]"}
    ),
    "notifications:project_subscriptions": Page(
        "project",
        lambda w: {
            "name": "probe",
            "channel": "webhook",
            "url": "https://hooks.example.org/probe",
            "events": ["job.failed"],
        },
    ),
    "notifications:my_subscriptions": Page(
        None,
        lambda w: {"name": "probe", "channel": "email", "email": "probe@example.org",
                   "events": ["job.failed"]},
    ),
    "notifications:alert_settings": Page("project", lambda w: {"waiting_minutes": "30"}),
    "scheduling:quota_edit": Page(
        "tenant", lambda w: {"guaranteed_gpus": "0", "borrow_limit_gpus": "0", "weight": "1.0"}
    ),
    "telemetry:idle_policy_edit": Page(
        "project",
        lambda w: {
            "enabled": "on",
            "threshold_percent": "5",
            "idle_minutes": "60",
            "grace_minutes": "15",
            "kinds": "notebook",
        },
    ),
}

# Pages that take a POST but no input to be hostile with, or are tested elsewhere.
NOT_FORMS = {
    "logout": "signs out; no fields",
    "oidc_logout": "signs out; no fields",
    "accounts:member_remove": "a button: nothing inside to confirm",
    "accounts:token_revoke": "a button",
    "accounts:invitation_revoke": "a button",
    "accounts:invitation_accept": "tests/accounts/test_invitations.py: tampered, expired, reused and "
    "withdrawn links, bad usernames and passwords, each refused with nothing changed",
    "projects:projectmember_remove": "a button: nothing inside to confirm",
    "jobs:job_cancel": "a button",
    "jobs:job_retry": "a button",
    "sweeps:sweep_stop": "a button (a confirmation page without fields)",
    "datasets:upload_abort": "a button",
    "datasets:dataset_archive": "test_hostile_archives_are_refused_at_upload_through_the_form",
    "images:image_resolve": "a button",
    "images:image_delete": "a button: nothing inside to confirm",
    "notifications:subscription_delete": "a button",
    "notifications:subscription_test": "a button: sends a test message",
    "notifications:subscription_confirm": "a button; tests/notifications/test_email.py: "
    "tampered and stale links confirm nothing",
    "modelhub:version_add": "test_uploaded_file_names_cannot_place_files_outside_their_folder",
    "checkpoints:checkpoint_resume": "a button",
    "checkpoints:checkpoint_register": "a button (the model name is the job's; hostile names: "
    "tests/checkpoints/test_pages.py)",
}


def _post_pages() -> list[str]:
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns, namespace=None):
        for p in patterns:
            if isinstance(p, URLResolver):
                if p.namespace != "admin" and not str(p.pattern).startswith("api/"):
                    yield from walk(p.url_patterns, p.namespace or namespace)
            elif isinstance(p, URLPattern) and hasattr(
                getattr(p.callback, "view_class", None), "post"
            ):
                yield f"{namespace}:{p.name}" if namespace else p.name

    return sorted(set(walk(get_resolver().url_patterns)))


def test_every_page_that_takes_a_post_is_probed():
    pages = {name.split("?")[0] for name in FORM_PAGES} | set(NOT_FORMS)
    missing = [name for name in _post_pages() if name not in pages]
    assert not missing, f"add these to FORM_PAGES (or NOT_FORMS, saying why): {missing}"


FORM_CORPUS = [h for h in CORPUS if h.raw is None] + [
    Hostile("unknown-id", "999999"),
    Hostile("two-values", ["probe", "other"]),
]
FORM_BY_ID = {h.id: h for h in FORM_CORPUS}
FORM_SLICE = 10
FORM_ALWAYS = {
    "number": ("huge-int", "float"),
    "select": ("unknown-id", "nul-byte"),
    "radio": ("unknown-id", "nul-byte"),
    "checkbox": ("unknown-id", "nul-byte"),
}


def _form_value(h: Hostile) -> Any:
    if isinstance(h.value, list):
        return [str(v) for v in h.value]
    return h.form_text


def _form_must_refuse(value: Any, spec: dict) -> bool:
    """What no field rendered like `spec` may accept (Django reads the last of repeated
    values, all of them for a multiple choice)."""
    values = value if isinstance(value, list) else [value]
    text = values[-1]
    kind = spec["kind"]
    if spec["disabled"]:
        return False
    choices = spec.get("options")
    if kind == "checkbox" and len(choices) == 1:
        return False  # a box that is ticked by anything
    if choices is not None:
        picked = values if spec.get("multiple") or kind == "checkbox" else [text]
        return any(v not in choices for v in picked) or (not text and spec["required"])
    if "\x00" in text:
        return True
    if not text.strip():
        return spec["required"]
    if kind == "number":
        # Bounds as rendered; else what the database holds (64 bits on SQLite).
        real = spec.get("step") == "any"
        try:
            number = float(text) if real else int(re.sub(r"\.0*$", "", text.strip()))
        except ValueError:
            return True
        low = float(spec.get("min", "-inf" if real else -(2**63)))
        high = float(spec.get("max", "inf" if real else 2**63 - 1))
        return not (math.isfinite(number) and low <= number <= high)
    return "maxlength" in spec and len(text.strip()) > int(spec["maxlength"])


ERROR_MARKS = ("invalid-feedback", "alert-danger", "errorlist")


def _form_problems(outcome: Outcome, refuse: bool, what: str) -> list[str]:
    if outcome.status >= 500:
        return [f"{what}: {outcome.show()}"]
    shown = any(mark in outcome.content.decode(errors="replace") for mark in ERROR_MARKS)
    if outcome.status in (301, 302, 303) or (outcome.status == 200 and not shown):
        return [f"{what}: accepted ({outcome.status})"] if refuse else []
    problems = []
    if not 400 <= outcome.status < 500 and outcome.status != 200:
        problems.append(f"{what}: answered {outcome.show()}")
    elif "html" in outcome.content_type and outcome.status in (200, 400) and not shown:
        problems.append(f"{what}: refused without showing why")
    if outcome.changes:
        problems.append(f"{what}: changed {outcome.changes[:5]}")
    return problems


def _page(world, name: str, client):
    from django.urls import reverse

    page = FORM_PAGES[name]
    route = name.split("?")[0]
    url = reverse(route, args=[world[page.target].pk] if page.target else [])
    client.logout()
    if page.signed_in:
        client.force_login(world["owner"])
    html = client.get((page.shown_at or url) + page.query)
    assert html.status_code == 200, f"GET {page.shown_at or url}: {html.status_code}"
    reader = _FormReader(url if page.shown_at else "")
    reader.feed(html.content.decode())
    assert reader.fields, f"{name}: no form found on the page"
    data = {**reader.defaults, **page.data(world)}
    data = {k: v for k, v in data.items() if v is not None}
    return url + page.query, reader.fields, data


@pytest.mark.parametrize("name", sorted(FORM_PAGES))
def test_form_base_values_are_accepted(name, world, client):
    """The control for the form probes: the page's own values plus a few are accepted."""
    url, _, data = _page(world, name, client)
    target = world[FORM_PAGES[name].target] if FORM_PAGES[name].target else None
    outcome = probe(lambda: client.post(url, data), target)
    assert outcome.status in (200, 302) and not _form_problems(outcome, False, name), outcome.show()
    assert outcome.status == 302 or "alert-danger" not in outcome.content.decode()


@pytest.mark.parametrize("name", sorted(FORM_PAGES))
def test_hostile_form_values_are_refused_and_change_nothing(name, world, client):
    url, fields, data = _page(world, name, client)
    target = world[FORM_PAGES[name].target] if FORM_PAGES[name].target else None
    chosen = {
        field: [FORM_BY_ID[i] for i in FORM_ALWAYS.get(spec["kind"], ("nul-byte", "huge-100k"))]
        for field, spec in fields.items()
    }
    # Each page gets a different slice of the rest of the corpus: across the pages every
    # value meets every kind of field, without every page getting every value.
    names = sorted(fields)
    offset = sorted(FORM_PAGES).index(name) * FORM_SLICE
    for i in range(FORM_SLICE):
        h = FORM_CORPUS[(offset + i) % len(FORM_CORPUS)]
        if not any(h in values for values in chosen.values()):
            chosen[names[i % len(names)]].append(h)
    page = FORM_PAGES[name]
    problems = []
    for name_, values in chosen.items():
        for h in values:
            value = _form_value(h)
            outcome = probe(lambda v=value, f=name_: client.post(url, {**data, f: v}), target)
            outcome.changes = [c for c in outcome.changes if c.split(":")[0] not in page.records]
            refuse = name_ not in page.free and _form_must_refuse(value, fields[name_])
            problems += _form_problems(outcome, refuse, f"{name_}={h.id}")
    assert not problems, f"{name}:\n" + "\n".join(problems)


# --- the executor's endpoints (a job's token; not in the OpenAPI schema) ------------------


@pytest.fixture
def running(world):
    """The queued job, running, with a token its executor would hold."""
    secret = "probe-secret"
    Job.objects.filter(pk=world["job"].pk).update(
        state="running", token_hash=Job.hash_token(secret)
    )
    token = make_token(0, secret)
    return world["job"], {"HTTP_AUTHORIZATION": f"Bearer {token}"}


EXECUTOR_BODIES = {
    "malformed": b"{not json",
    "array": b"[1]",
    "nested-100k": b"[" * 100_000 + b"]" * 100_000,
    "nan-literal": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "x", "ts": NaN}]}',
    "inf-by-overflow": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "x", "ts": 1e400}]}',
    "lone-surrogate": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "\\ud800"}]}',
    "invalid-utf8": b'{"lines": [{"seq": 1, "stream": "stdout", "text": "\xff"}]}',
    "another-worker": b'{"worker": 3, "lines": []}',
}


def _executor_cases() -> dict[str, tuple[str, Any]]:
    line = {"seq": 1, "stream": "stdout", "text": "x"}
    metric = {"seq": 1, "name": "loss", "value": 0.5, "step": 1}
    return {
        "lines-object": ("logs", {"lines": {"seq": 1}}),
        "seq-zero": ("logs", {"lines": [{**line, "seq": 0}]}),
        "seq-true": ("logs", {"lines": [{**line, "seq": True}]}),
        "seq-string": ("logs", {"lines": [{**line, "seq": "1"}]}),
        "seq-huge": ("logs", {"lines": [{**line, "seq": 10**30}]}),
        "seq-int64-max+1": ("logs", {"lines": [{**line, "seq": 2**63}]}),
        "stream-unknown": ("logs", {"lines": [{**line, "stream": "stdin"}]}),
        "text-not-text": ("logs", {"lines": [{**line, "text": ["x"]}]}),
        "line-not-object": ("logs", {"lines": ["x"]}),
        "metrics-object": ("metrics", {"metrics": {"seq": 1}}),
        "metric-name-empty": ("metrics", {"metrics": [{**metric, "name": ""}]}),
        "metric-name-list": ("metrics", {"metrics": [{**metric, "name": ["loss"]}]}),
        "metric-name-nul": ("metrics", {"metrics": [{**metric, "name": "lo\x00ss"}]}),
        "metric-value-text": ("metrics", {"metrics": [{**metric, "value": "0.5"}]}),
        "metric-value-true": ("metrics", {"metrics": [{**metric, "value": True}]}),
        "metric-value-huge": ("metrics", {"metrics": [{**metric, "value": 10**400}]}),
        "metric-step-float": ("metrics", {"metrics": [{**metric, "step": 1.5}]}),
        "metric-step-huge": ("metrics", {"metrics": [{**metric, "step": 10**30}]}),
        "metric-seq-huge": ("metrics", {"metrics": [{**metric, "seq": 2**63}]}),
        "status-unknown-event": ("status", {"event": "exploded"}),
        "status-unknown-outcome": ("status", {"event": "exited", "outcome": "won"}),
    }


def test_hostile_executor_bodies_are_refused(running):
    job, auth = running
    problems = []
    for endpoint in ("logs", "metrics", "heartbeat", "status"):
        url = f"/api/v1/executor/jobs/{job.pk}/{endpoint}"
        for name, body in EXECUTOR_BODIES.items():
            if endpoint == "heartbeat" and name in (
                "nan-literal",
                "inf-by-overflow",
                "lone-surrogate",
            ):
                continue  # a heartbeat reads nothing but the worker
            outcome = probe(
                lambda u=url, b=body: Client().generic(
                    "POST", u, b, content_type="application/json", **auth
                ),
                job,
            )
            problems += _problems_of_answer(outcome, True, f"{endpoint} {name}")
    for name, (endpoint, body) in _executor_cases().items():
        url = f"/api/v1/executor/jobs/{job.pk}/{endpoint}"
        outcome = probe(
            lambda u=url, b=body: Client().generic(
                "POST", u, _json_text(b), content_type="application/json", **auth
            ),
            job,
        )
        problems += _problems_of_answer(outcome, True, name)
    assert not problems, "\n".join(problems)


def test_a_garbled_exit_report_is_kept_with_what_can_be_stored(running):
    """An exit report is never dropped (the worker would look alive until it is lost):
    what cannot be stored in it is left out instead."""
    job, auth = running
    client = Client()
    url = f"/api/v1/executor/jobs/{job.pk}/status"
    started = {"event": "started", "pid": 10**30}
    response = client.post(url, json.dumps(started), content_type="application/json", **auth)
    assert response.status_code == 200, response.content
    exited = {"event": "exited", "outcome": "failed", "exit_code": 10**30, "reason": "oom\x00!"}
    response = client.post(url, json.dumps(exited), content_type="application/json", **auth)
    assert response.status_code == 200, response.content
    worker = job.worker_set.get()
    assert (worker.state, worker.child_pid, worker.exit_code, worker.reason) == (
        "failed",
        None,
        None,
        "oom!",
    )


def test_an_executor_body_over_the_upload_limit_is_refused(running, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    job, auth = running
    lines = [{"seq": i + 1, "stream": "stdout", "text": "x" * 100} for i in range(200)]
    outcome = probe(
        lambda: Client().generic(
            "POST",
            f"/api/v1/executor/jobs/{job.pk}/logs",
            json.dumps({"lines": lines}),
            content_type="application/json",
            **auth,
        ),
        job,
    )
    assert not refusal_problems(outcome), outcome.show()


def test_hostile_artifact_uploads_are_refused(running):
    job, auth = running
    data = b"weights"
    digest = hashlib.sha256(data).hexdigest()
    cases = {
        "dotdot": ("../../evil", data, digest, "0"),
        "inner-dotdot": ("a/../../evil", data, digest, "0"),
        "encoded-dotdot": ("%2e%2e/%2e%2e/evil", data, digest, "0"),
        "absolute": ("/etc/passwd", data, digest, "0"),
        "backslashes": ("..\\..\\evil", data, digest, "0"),
        "nul": ("evil%00.txt", data, digest, "0"),
        "huge-name": ("n" * 2000, data, digest, "0"),
        "checksum-wrong": ("out.bin", data, "0" * 64, "0"),
        "checksum-missing": ("out.bin", data, "", "0"),
        "another-worker": ("out.bin", data, digest, "1"),
    }
    problems = []
    for name, (path, body, sha, worker) in cases.items():
        outcome = probe(
            lambda p=path, b=body, s=sha, k=worker: Client().generic(
                "PUT",
                f"/api/v1/executor/jobs/{job.pk}/artifacts/{p}",
                b,
                content_type="application/octet-stream",
                HTTP_X_GANTRY_SHA256=s,
                HTTP_X_GANTRY_WORKER=k,
                **auth,
            ),
            job,
        )
        problems += _problems_of_answer(outcome, True, name)
    assert not problems, "\n".join(problems)


# --- malformed job specs through the submit form ------------------------------------------

BAD_FORM_SPECS = {
    "env-name-with-space": {"env": "A B=1"},
    "env-name-digit-first": {"env": "1A=1"},
    "env-name-empty": {"env": "=1"},
    "env-no-equals": {"env": "A"},
    "env-name-unicode": {"env": "ÄPFEL=1"},
    "env-name-gantry": {"env": "GANTRY_JOB_TOKEN=mine"},
    "env-value-1mb": {"env": "A=" + MIB},
    "parameters-nan": {"parameters": "lr=nan"},
    "parameters-inf": {"parameters": "lr=inf"},
    "parameters-overflow": {"parameters": "lr=1e400"},
    "parameters-name-dashes": {"parameters": "--lr=1"},
    "parameters-no-equals": {"parameters": "lr"},
    "parameters-value-1mb": {"parameters": "lr=" + MIB},
    "command-1mb": {"command": "python " + MIB},
    "command-unbalanced-quote": {"command": "python 'train.py"},
    "name-too-long": {"name": "n" * 201},
    "runtime-not-python": {"runtime": "/etc/passwd"},
    "runtime-relative": {"runtime": "../../bin/sh"},
    "timeout-zero": {"timeout_seconds": "0"},
    "timeout-huge": {"timeout_seconds": "9" * 30},
    "timeout-int32-max+1": {"timeout_seconds": str(2**31)},
    "timeout-scientific": {"timeout_seconds": "1e3"},
    "gpus-negative": {"gpus": "-1"},
    "gpus-huge": {"gpus": "9" * 30},
    "cpus-zero": {"cpus": "0"},
    "memory-tiny": {"memory_mb": "1"},
    "retries-too-many": {"max_retries": "11"},
    "priority-too-high": {"priority": "1001"},
    "image-of-another-tenant": {"image": "OTHER_IMAGE"},
    "image-word": {"image": "abc"},
}


def test_malformed_job_specs_through_the_submit_form_are_refused(world, client):
    url, fields, data = _page(world, "jobs:job_add", client)
    problems = []
    cases = {**BAD_FORM_SPECS, "workers-on-a-train-job": {"workers": "2"}}
    for name, override in cases.items():
        override = {
            k: str(world["other_image"].pk) if v == "OTHER_IMAGE" else v
            for k, v in override.items()
        }
        outcome = probe(lambda o=override: client.post(url, {**data, **o}), world["project"])
        problems += _form_problems(outcome, name != "workers-on-a-train-job", name)
    # A distributed job: the number of workers is bounded too.
    url, _, data = _page(world, "jobs:job_add?kind=distributed", client)
    for workers in ("0", "65", "9" * 30):
        outcome = probe(
            lambda w=workers: client.post(url, {**data, "workers": w}), world["project"]
        )
        problems += _form_problems(outcome, True, f"workers={workers[:10]}")
    assert not problems, "\n".join(problems)
