"""What the benchmarks share: a free loopback port (core.ports, as the tests and the local
backend draw it) and percentiles (linear interpolation, as numpy's default). Imported by
the scripts beside it (`python bench/<script>.py`)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)  # core.ports: the standard library only, no Django

from core.ports import free_port  # noqa: E402, F401 (the scripts import it from here)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
