"""The steps of validate_spec, one field each: what each cleans and what it refuses.

The local backend is the real one, on the 4-CPU, 8 GiB machine without GPUs that
`job_settings` describes (whatever runs the tests)."""

import math

import pytest
from django.core.exceptions import ValidationError

from jobs.compute import get_backend
from jobs.services.validation import (
    MAX_COMMAND,
    capacity_problems,
    clean_command,
    clean_env,
    clean_inputs,
    clean_name,
    clean_numbers,
    clean_outputs_dir,
    clean_parameters,
    kind_problem,
    validate_spec,
)


@pytest.fixture
def backend(job_settings):
    return get_backend("local")


def test_a_notebooks_command_is_always_empty():
    assert clean_command("notebook", "rm -rf /") == ("", None)


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("", "Give the command to run"),
        ("   ", "Give the command to run"),
        ("python 'train.py", "Cannot split the command into arguments"),
        ("x" * (MAX_COMMAND + 1), f"At most {MAX_COMMAND} characters."),
    ],
)
def test_a_command_that_cannot_run_is_refused(command, problem):
    _, got = clean_command("train", command)
    assert got is not None and got.startswith(problem)


def test_a_command_is_kept_as_written_without_outer_spaces():
    assert clean_command("train", "  python train.py --lr 0.1 ") == (
        "python train.py --lr 0.1",
        None,
    )


def test_a_job_without_a_name_is_named_for_its_kind_and_command():
    assert clean_name("", "train", "python train.py") == ("train: python train.py", None)
    assert clean_name(None, "notebook", "") == ("notebook", None)
    assert len(clean_name(" ", "train", "x" * 500)[0]) == 80
    assert clean_name("n" * 201, "train", "true")[1] == "At most 200 characters."


def test_an_unknown_kind_names_the_kinds_there_are():
    assert kind_problem("train") is None
    assert kind_problem("batch") == "Choose one of: train, distributed, notebook."


@pytest.mark.parametrize(
    ("parameters", "problem"),
    [
        ([1, 2], "Parameters must be a mapping"),
        ({"1lr": 1}, "“1lr” is not a valid parameter name"),
        ({"lr": math.nan}, "Parameter “lr” must be a number, true/false or text, not float"),
        ({"lr": [1]}, "Parameter “lr” must be a number, true/false or text, not list"),
        ({"lr": "a\x00b"}, "Parameter “lr”: at most"),
    ],
)
def test_parameters_that_cannot_reach_a_job_are_refused(parameters, problem):
    _, got = clean_parameters(parameters)
    assert got is not None and got.startswith(problem)


def test_parameters_keep_their_types():
    params = {"lr": 0.001, "epochs": 3, "fast": True, "name-x": "resnet"}
    assert clean_parameters(params) == (params, None)
    assert clean_parameters(None) == ({}, None)


def test_environment_values_become_text_and_gantrys_variables_are_refused():
    assert clean_env({"SEED": 1, "FAST": True}) == ({"SEED": "1", "FAST": "True"}, None)
    cleaned, problem = clean_env({"SEED": "1", "GANTRY_JOB_TOKEN": "stolen"})
    assert cleaned == {} and problem == (
        "GANTRY_JOB_TOKEN: variables starting with GANTRY_ are set by Gantry."
    )
    assert clean_env({"A-B": "1"})[1] == "“A-B” is not a valid environment variable name."
    assert clean_env({"X": math.inf})[1] == "X must be text or a number."


def test_only_distributed_jobs_have_more_than_one_worker():
    errors = {}
    numbers = clean_numbers(errors, {"workers": 2}, "train")
    assert numbers["workers"] == 2 and numbers["cpus"] == 1 and numbers["memory_mb"] == 1024
    assert errors == {"workers": "Only distributed jobs have more than one worker."}
    errors = {}
    clean_numbers(errors, {"workers": 2, "gpus": "two"}, "distributed")
    assert errors == {"gpus": "Enter a whole number."}


def test_resources_beyond_the_backend_are_refused_for_the_whole_gang(backend):
    clean = {"workers": 3, "gpus": 0, "cpus": 2, "memory_mb": 1024}
    assert capacity_problems(clean, backend) == {
        "cpus": "Asks for 6 CPU(s) (2 for each of 3 workers), but there are only 4 "
        f"{backend.where}: it can never run as submitted."
    }
    assert capacity_problems(clean, backend, skip={"cpus": "already wrong"}) == {}
    assert capacity_problems({**clean, "workers": 2}, backend) == {}


def test_inputs_and_outputs_keep_to_their_shapes():
    assert clean_inputs(None) == ([], None)
    assert clean_inputs({"dataset_version": 1}) == ([], "Inputs must be a list.")
    assert clean_inputs([{"path": "a\x00"}])[1] == (
        "Inputs may not hold NUL characters or non-finite numbers."
    )
    assert clean_outputs_dir(" /results/ ") == ("results", None)
    assert clean_outputs_dir("") == ("outputs", None)
    assert clean_outputs_dir("a/../../etc")[1] == (
        "A relative folder inside the job's working directory."
    )


def test_validate_spec_reports_every_field_at_once(backend):
    with pytest.raises(ValidationError) as refused:
        validate_spec(
            {"kind": "train", "command": "", "env": {"GANTRY_X": "1"}, "cpus": 99, "bogus": 1},
            backend,
        )
    assert set(refused.value.message_dict) == {"__all__", "command", "env", "cpus"}


def test_validate_spec_returns_every_field_cleaned(backend):
    clean = validate_spec({"command": " python train.py ", "parameters": {"lr": 0.1}}, backend)
    assert clean == {
        "kind": "train",
        "command": "python train.py",
        "name": "train: python train.py",
        "runtime": "",
        "parameters": {"lr": 0.1},
        "env": {},
        "gpus": 0,
        "cpus": 1,
        "memory_mb": 1024,
        "workers": 1,
        "timeout_seconds": None,
        "max_retries": 0,
        "priority": 0,
        "inputs": [],
        "code_snapshot": None,  # checked at submit by snapshots' services
        "outputs_dir": "outputs",
    }
