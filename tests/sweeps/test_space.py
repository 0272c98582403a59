"""The sweep document: what is accepted, and the message for what is not."""

import json

import pytest
from django.core.exceptions import ValidationError

from sweeps.models import Sweep
from sweeps.services import create_sweep
from sweeps.space import parse_sweep
from tests.sweeps.conftest import DOC


def errors_of(doc) -> dict:
    with pytest.raises(ValidationError) as caught:
        parse_sweep(doc if isinstance(doc, str) else json.dumps(doc))
    return caught.value.message_dict


def test_yaml_is_parsed_into_the_sweep_fields():
    clean = parse_sweep(
        """
name: digits
objective: {metric: val_loss, direction: minimize}
template: {command: python train.py}
parameters:
  lr: {type: float, low: 1.0e-4, high: 0.1, log: true}
  width: {type: int, low: 16, high: 64, step: 16}
pruner: {type: asha, reduction_factor: 2}
budget: {trials: 6, wall_minutes: 30}
"""
    )
    assert clean["space"]["lr"] == {"type": "loguniform", "low": 1e-4, "high": 0.1}
    assert clean["space"]["width"]["step"] == 16
    assert clean["direction"] == "minimize"
    assert clean["pruner"]["type"] == "asha" and clean["pruner"]["reduction_factor"] == 2
    assert clean["max_trials"] == 6 and clean["max_wall_seconds"] == 1800


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"parameters": {"lr": {"type": "uniform", "low": 1, "high": 0.1}}}, "parameters", "low must be below high"),
        ({"parameters": {"lr": {"type": "loguniform", "low": 0, "high": 1}}}, "parameters", "starts above 0"),
        ({"parameters": {"lr": {"type": "gaussian"}}}, "parameters", "parameters.lr.type"),
        ({"parameters": {"m": {"type": "uniform", "low": 0, "high": 1, "when": {"opt": "sgd"}}}}, "parameters", "not a categorical parameter declared above"),
        ({"parameters": {}}, "parameters", "at least one parameter"),
        ({"objective": {"metric": "acc", "direction": "up"}}, "objective", "maximize or minimize"),
        ({"budget": {}}, "budget", "at least one of"),
        ({"budget": {"trials": -3}}, "budget.trials", "positive integer"),
        ({"sampler": "bayes"}, "sampler", "random, grid, tpe, cmaes"),
        ({"sampler": "grid"}, "sampler", "make it categorical"),
        ({"pruner": {"type": "asha", "reduction_factor": 1}}, "pruner", "at least 2"),
        ({"template": {"cpus": 1}}, "template", "at least a command"),
    ],
)
def test_a_bad_document_is_refused_with_a_message_naming_the_field(change, field, words):
    problems = errors_of({**DOC, **change})
    assert field in problems, problems
    assert any(words in message for message in problems[field]), problems[field]


def test_broken_yaml_says_where():
    problems = errors_of("name: x\nparameters: {lr: [\n")
    assert "line" in problems["source"][0]


def test_a_grid_sweep_runs_at_most_its_grid():
    clean = parse_sweep(json.dumps({**DOC, "sampler": "grid", "budget": {"trials": 50}, "parameters": {
        "bs": {"type": "categorical", "choices": [32, 64]}, "width": {"type": "int", "low": 1, "high": 3}}}))
    assert clean["max_trials"] == 6


def test_a_template_jobs_would_refuse_is_refused_and_nothing_is_created(owner, project):
    doc = {**DOC, "template": {"command": "python train.py", "cpus": 10_000}}
    with pytest.raises(ValidationError) as caught:
        create_sweep(owner, project, json.dumps(doc))
    assert any("template.cpus" in m for m in caught.value.message_dict["template"])
    assert not Sweep.objects.exists()


def test_a_viewer_cannot_create_a_sweep(member, project):
    from django.core.exceptions import PermissionDenied
    from django.http import Http404

    with pytest.raises((PermissionDenied, Http404)):
        create_sweep(member, project, json.dumps(DOC))
