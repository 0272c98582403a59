"""Malformed job specs (and prediction specs, which are job specs too), through the
API and through the submit form."""

from __future__ import annotations

import pytest

from datasets.models import DatasetVersion
from tests.hostile.corpus import nested
from tests.hostile.world import (
    BASES,
    _api,
    _form_problems,
    _json_text,
    _page,
    _problems_of_answer,
    _send_json,
    probe,
    refusal_problems,
)

pytestmark = pytest.mark.django_db


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
