"""Gantry's GPU scheduler: a pure policy (no Django) plus a trace simulator.

The live scheduler builds a :class:`Snapshot` once per pass and calls :func:`schedule`;
``bench/simulate.py`` and :func:`run_simulation` drive the very same function on traces.
"""

from .policy.data import (
    WAIT_CODES,
    Decision,
    JobRequest,
    Node,
    PolicyConfig,
    Quota,
    Reservation,
    RunningJob,
    Snapshot,
    WaitReason,
)
from .policy.messages import human_duration
from .policy.schedule_pass import QueueCache, schedule, schedule_fifo
from .sim_metrics import check_state, jain_index, percentile, water_fill
from .simulator import SimulationError, run_simulation
from .traces import (
    TraceError,
    TraceJob,
    load_trace,
    load_vc_nodes,
    parse_trace,
    to_requests,
    window,
)

__all__ = [
    "WAIT_CODES",
    "Decision",
    "JobRequest",
    "Node",
    "PolicyConfig",
    "QueueCache",
    "Quota",
    "Reservation",
    "RunningJob",
    "SimulationError",
    "Snapshot",
    "TraceError",
    "TraceJob",
    "WaitReason",
    "check_state",
    "human_duration",
    "jain_index",
    "load_trace",
    "load_vc_nodes",
    "parse_trace",
    "percentile",
    "run_simulation",
    "schedule",
    "schedule_fifo",
    "to_requests",
    "water_fill",
    "window",
]
