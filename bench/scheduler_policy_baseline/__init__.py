"""The scheduling policy as it was before the faster passes of issue 40 (a copy of
``scheduling/policy`` at 1f5e4f8), kept unchanged so that ``bench/scheduler_micro.py`` times
it beside the current one in the same run and ``tests/scheduling/test_pass_equivalence.py``
checks that both decide the same. A deliberate change of the policy's decisions refreshes
this copy (``cp scheduling/policy/*.py`` here) in the same commit."""

from .schedule_pass import schedule  # noqa: F401
