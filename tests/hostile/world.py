"""What every probe shares: sending one request in a savepoint and judging its answer,
the API's write operations (read from the OpenAPI schema) with a body each accepts, and
the pages that take a POST with the values that make each form valid."""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from tests.hostile import state
from tests.hostile.corpus import Hostile
from tests.modelhub.builders import FAKE_REGISTRY

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
COMPONENTS = SCHEMA["components"]["schemas"]
WRITE_METHODS = ("post", "put", "patch")


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


def _problems_of_answer(outcome: Outcome, refuse: bool, what: str) -> list[str]:
    if outcome.status >= 500:
        return [f"{what}: {outcome.show()}"]
    if refuse or not 200 <= outcome.status < 300:
        return [f"{what}: {p}" for p in refusal_problems(outcome)]
    return []


# --- the API: the schema's write operations, and a body each accepts --------------------


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


SWEEP_DOC = {
    "name": "probe sweep",
    "objective": "val_accuracy",
    "template": {"command": "python -c pass"},
    "parameters": {"lr": {"type": "loguniform", "low": 0.001, "high": 0.1}},
    "budget": {"trials": 2},
}


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
    # The raw-bytes part upload has its own tests (test_uploads.py, test_part_uploads_*).
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
    ("post", "/api/v1/endpoints/"): Base(
        lambda w: {
            "project": w["project"].pk,
            "name": "probe-endpoint",
            "model": w["endpoint"].model_id,
            "version": 1,
            "replicas": 1,
            "idle_seconds": 60,
        }
    ),
    ("patch", "/api/v1/endpoints/{id}/"): Base(
        lambda w: {"replicas": 2, "rate_limit": 10}, "endpoint", 200
    ),
    ("post", "/api/v1/endpoints/{id}/tokens/"): Base(lambda w: {"name": "probe"}, "endpoint"),
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
    # Many contents in one tar: a JSON body is no tar (tests/snapshots/test_api.py sends
    # real ones).
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


# --- forms: what a page's form holds, and the values that make it valid -----------------


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
    "endpoints:endpoint_token_create": Page("endpoint", lambda w: {"name": "probe"}, free=("name",)),
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
