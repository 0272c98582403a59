"""Reasons and ETAs: the plain words a waiting job is given, and the decision's waiting list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .data import Decision, JobRequest, WaitReason


def human_duration(seconds: float) -> str:
    """'~45 min', '~2 h', '~3 d' style rounding for messages."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"{int(round(s))} s"
    if s < 90 * 60:
        return f"{int(round(s / 60))} min"
    if s < 36 * 3600:
        return f"{int(round(s / 3600))} h"
    return f"{int(round(s / 86400))} d"


def plural(n: float, word: str) -> str:
    n = int(n) if float(n).is_integer() else n
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def finish_decision(
    order: Sequence[JobRequest],
    admitted: set[str],
    pre: Mapping[str, tuple[str, str, float | None]],
    decision: Decision,
) -> Decision:
    pos = 0
    waiting = decision.waiting
    new = tuple.__new__  # WaitReason(...) without the Python-level __new__ per job
    for r in order:
        rid = r.id
        if rid in admitted:
            continue
        pos += 1
        code, msg, est = pre[rid]
        waiting[rid] = new(WaitReason, (code, msg, pos, est))
    return decision


def waiting_in_order(
    pre: Mapping[str, tuple[str, str, float | None]], decision: Decision
) -> Decision:
    """``finish_decision`` for a pass whose ``pre`` holds exactly its waiting jobs, in pass
    order (job ids are unique): positions follow that order."""
    waiting = decision.waiting
    new = tuple.__new__
    for pos, (rid, (code, msg, est)) in enumerate(pre.items(), 1):
        waiting[rid] = new(WaitReason, (code, msg, pos, est))
    return decision
