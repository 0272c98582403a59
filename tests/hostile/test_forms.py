"""Forms: every server-rendered page that takes a POST, each field probed with the
corpus. The pages and the values that make each form valid are FORM_PAGES in world.py."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from tests.hostile.corpus import CORPUS, Hostile
from tests.hostile.world import FORM_PAGES, _form_problems, _page, probe

pytestmark = pytest.mark.django_db


# --- forms: every server-rendered page that takes a POST ----------------------------------


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
    "endpoints:endpoint_delete": "a button (the name typed once requests or tokens go with it)",
    "endpoints:endpoint_create": "tests/endpoints/test_services.py: every field refused with a "
    "message and nothing created (the form hands them to the same service)",
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
