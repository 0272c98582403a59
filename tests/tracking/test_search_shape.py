"""The run search's query shape (tracking/search.py): comparisons that need a key join its
one row, so the database can start from the (key, value) index instead of testing every
run of the experiment; negations and IS [NOT] NULL stay EXISTS. These pin the shape and
its results where the two could differ (a key named twice, missing keys, NaN), through
the service the API calls. Speed itself is measured in bench/mlflow_search.py."""

import pytest

from tracking import search
from tracking.models import Run
from tracking.services.access import Caller, default_experiment
from tracking.services.runs import create_run, log_batch, search_runs

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(owner, project):
    """Five runs: acc 0.1 … 0.5 (the fourth NaN, the fifth none), lr alternating, and a
    'family' tag on the first three only."""
    caller = Caller(owner)
    experiment = default_experiment(project)
    made = []
    for i in range(5):
        run = create_run(caller, str(experiment.pk), start_time=1000 + i, run_name=f"r{i}")
        metrics = []
        if i < 4:
            value = "NaN" if i == 3 else (i + 1) / 10
            metrics = [{"key": "acc", "value": value, "timestamp": 1, "step": 0}]
        tags = [{"key": "family", "value": "cnn" if i % 2 else "mlp"}] if i < 3 else []
        log_batch(
            caller,
            run.run_id,
            metrics=metrics,
            params=[{"key": "lr", "value": "0.1" if i % 2 else "0.01"}],
            tags=tags,
        )
        made.append(run.run_id)
    return caller, experiment, made


def found(runs_fixture, filter_string, order_by=()):
    caller, experiment, _ = runs_fixture
    page, _ = search_runs(caller, [str(experiment.pk)], filter_string, None, 100, list(order_by), 0)
    return [run.name for run in page]


def test_a_key_named_twice_is_one_join_and_both_bounds_hold(runs):
    assert found(runs, "metrics.acc > 0.1 and metrics.acc < 0.3") == ["r1"]
    clauses = search.parse_filter("metrics.acc > 0.1 and metrics.acc < 0.3 and params.lr = '0.1'")
    joins: dict = {}
    query = search.apply_order(
        search.apply_filter(Run.objects.all(), clauses, joins), ["metrics.acc DESC"], joins
    )
    sql = str(query.query)
    assert "EXISTS" not in sql and sql.count("JOIN") == 2  # one for acc, one for lr


def test_nan_never_satisfies_a_comparison_and_missing_keys_sort_last(runs):
    assert found(runs, "metrics.acc >= 0") == ["r2", "r1", "r0"]  # newest first
    # r4 has no acc: last both ways (r3's NaN is stored as 0.0 beside its is_nan flag).
    assert found(runs, "", ["metrics.acc DESC"])[-1] == "r4"
    assert found(runs, "", ["metrics.acc ASC"])[-1] == "r4"
    assert found(runs, "", ["metrics.acc DESC"])[:3] == ["r2", "r1", "r0"]


def test_negations_and_nulls_keep_their_meaning(runs):
    # != needs the key present (MLflow's rule): r3 and r4 have no family tag.
    assert found(runs, "tags.family != 'cnn'", ["tags.family ASC"]) == ["r2", "r0"]
    assert found(runs, "tags.family IS NULL") == ["r4", "r3"]
    assert found(runs, "params.lr NOT IN ('0.1') and tags.family LIKE 'm%'") == ["r2", "r0"]
    assert found(runs, "params.lr IN ('0.1') and metrics.acc > 0", ["params.lr"]) == ["r1"]


def test_the_search_costs_the_same_queries_for_one_run_or_many(runs, django_assert_num_queries):
    with django_assert_num_queries(8):
        assert len(found(runs, "params.lr = '0.1'", ["metrics.acc DESC"])) == 2
    with django_assert_num_queries(8):
        assert len(found(runs, "", ["metrics.acc DESC", "tags.family"])) == 5
