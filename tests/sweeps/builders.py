"""A sweep for the generated access tests (tests/test_access.py walks every URL)."""

import json

from sweeps.services import create_sweep


def access_objects(tenant, project, owner) -> dict:
    from sweeps.models import Sweep

    doc = {
        "name": "ci", "objective": "val_accuracy", "template": {"command": "python -c pass"},
        "parameters": {"lr": {"type": "uniform", "low": 0.1, "high": 1}}, "budget": {"trials": 1},
    }
    return {Sweep: create_sweep(owner, project, json.dumps(doc))}
