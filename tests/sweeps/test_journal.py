"""Optuna's journal in Gantry's table: a study is rebuilt from the stored entries alone."""

import optuna
import pytest

from sweeps.journal import DjangoJournalBackend, storage_for
from sweeps.models import StudyLog


@pytest.fixture
def sweep(make_sweep):
    return make_sweep()


def test_a_study_resumes_from_the_journal_in_a_fresh_storage(sweep):
    study = optuna.create_study(study_name="s", storage=storage_for(sweep.pk), direction="maximize")
    for x in (0.1, 0.5, 0.3):
        trial = study.ask()
        trial.suggest_float("x", 0, 1)
        study.tell(trial, x)
    running = study.ask()
    running.report(0.25, step=1)

    # As a restarted worker would: a new storage object replays the rows.
    again = optuna.load_study(study_name="s", storage=storage_for(sweep.pk))
    trials = again.get_trials()
    assert [t.value for t in trials[:3]] == [0.1, 0.5, 0.3]
    assert again.best_value == 0.5
    assert trials[3].state == optuna.trial.TrialState.RUNNING
    assert trials[3].intermediate_values == {1: 0.25}
    again.tell(3, 0.9)
    assert optuna.load_study(study_name="s", storage=storage_for(sweep.pk)).best_value == 0.9


def test_entries_are_numbered_per_sweep_and_read_from_a_number_on(make_sweep):
    a, b = make_sweep(), make_sweep()
    DjangoJournalBackend(a.pk).append_logs([{"op": 1}, {"op": 2}])
    DjangoJournalBackend(b.pk).append_logs([{"op": 9}])
    DjangoJournalBackend(a.pk).append_logs([{"op": 3}])
    assert list(StudyLog.objects.filter(sweep=a).values_list("number", flat=True)) == [0, 1, 2]
    assert DjangoJournalBackend(a.pk).read_logs(1) == [{"op": 2}, {"op": 3}]
    assert DjangoJournalBackend(b.pk).read_logs(0) == [{"op": 9}]
