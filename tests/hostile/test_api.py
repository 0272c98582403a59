"""The API: every write operation of the schema, field by field with the corpus, and
whole bodies that are malformed, mistyped, too deep or too large."""

from __future__ import annotations

import json

import pytest

from tests.hostile.corpus import Hostile, must_refuse, nested, round_trips, sample
from tests.hostile.world import (
    BASES,
    SCHEMA,
    WRITE_OPERATIONS,
    _api,
    _json_text,
    _op_id,
    _problems_of_answer,
    _request_schema,
    _send_json,
    _url,
    probe,
    refusal_problems,
)

pytestmark = pytest.mark.django_db


# --- the API: every write operation of the schema -----------------------------------------


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
