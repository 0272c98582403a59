"""Loading and validating GPU cluster traces (CSV or gzip-compressed CSV).

Required columns: ``job_id``, ``submit_time`` (seconds), ``duration`` (seconds, > 0) and
``num_gpus`` (integer >= 0). Optional: ``tenant`` (default ``"default"``; ``tenant_column``
names another column for traces without one, e.g. Alibaba's ``qos``), ``priority``
(integer, default 0), ``censored`` (0/1). Any other column is ignored. Rows with
``censored = 1`` (still running or pending when the trace ended, e.g. Alibaba's openb list)
are skipped by default because their true duration is unknown.

Optional ``requested_time`` (alias ``time_limit``): the walltime the user asked for (seconds,
> 0), i.e. what the live scheduler would know as the job's timeout; blank means none.

A malformed *row* (duration 0, a non-number, a duplicate id, a wrong field count...) is skipped
and recorded: the returned list's ``skipped`` holds ``(line, reason)`` pairs and
``skip_counts`` counts them per reason, so one bad row does not reject a 100,000-row file.
With ``strict=True`` the first malformed row raises ``TraceError`` instead, naming the file, the
1-based line number (the header is line 1) and the column. A missing header or required column
always raises.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .policy.data import JobRequest, Node, Quota

__all__ = [
    "ESTIMATES",
    "TraceError",
    "TraceJob",
    "TraceJobs",
    "gang_split",
    "load_trace",
    "load_vc_nodes",
    "parse_trace",
    "synthetic_trace",
    "to_requests",
    "user_estimate",
    "window",
]

REQUIRED = ("job_id", "submit_time", "duration", "num_gpus")
REQUESTED = ("requested_time", "time_limit")


class TraceError(ValueError):
    """A malformed trace; ``line`` is 1-based (header = 1), ``column`` the column name."""

    def __init__(
        self, message: str, *, source: str = "", line: int | None = None, column: str | None = None
    ) -> None:
        where = source or "trace"
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")
        self.source = source
        self.reason = message
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_time: float
    duration: float
    num_gpus: int
    tenant: str = "default"
    priority: int = 0
    requested: float | None = None  # the user's requested walltime (timeout), if the trace has it


class TraceJobs(list):
    """A list of ``TraceJob`` plus what was skipped: ``skipped`` = [(line, reason)]."""

    def __init__(self, jobs=(), skipped=()) -> None:
        super().__init__(jobs)
        self.skipped: list[tuple[int, str]] = list(skipped)

    @property
    def skip_counts(self) -> dict[str, int]:
        """Skipped rows per reason (the reason without its line number)."""
        out: dict[str, int] = {}
        for _, reason in self.skipped:
            out[reason] = out.get(reason, 0) + 1
        return out


def _open_text(path: str | os.PathLike) -> io.TextIOBase:
    p = os.fspath(path)
    if p.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", newline="")
    return open(p, encoding="utf-8", newline="")


def _number(value: str | None, *, source: str, line: int, column: str) -> float:
    if value is None or value.strip() == "":
        raise TraceError("missing value", source=source, line=line, column=column)
    try:
        x = float(value)
    except ValueError:
        raise TraceError(
            f"not a number: {value!r}", source=source, line=line, column=column
        ) from None
    if not math.isfinite(x):
        raise TraceError(f"not a finite number: {value!r}", source=source, line=line, column=column)
    return x


def _integer(value: str | None, *, source: str, line: int, column: str) -> int:
    x = _number(value, source=source, line=line, column=column)
    if x != int(x):
        raise TraceError(f"not a whole number: {value!r}", source=source, line=line, column=column)
    return int(x)


def parse_trace(
    lines: Iterable[str],
    *,
    source: str = "trace",
    skip_censored: bool = True,
    strict: bool = False,
    tenant_column: str = "tenant",
) -> TraceJobs:
    """Parse CSV text lines into jobs sorted by submit time (stable for ties).

    Malformed rows are skipped and listed in the result's ``skipped`` (``strict``: raise)."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError("empty file (no header row)", source=source, line=1) from None
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceError(
            f"missing required column(s) {', '.join(missing)}; found {', '.join(header)}",
            source=source,
            line=1,
        )
    col = {name: header.index(name) for name in header}
    jobs: list[TraceJob] = []
    skipped: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    req_col = next((c for c in REQUESTED if c in col), None)
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        try:
            job = _parse_row(
                row, header, col, seen, line, source, skip_censored, req_col, tenant_column
            )
        except TraceError as exc:
            if strict:
                raise
            where = f"column {exc.column!r}: " if exc.column else ""
            skipped.append((line, where + exc.reason))
            continue
        if job is not None:
            jobs.append(job)
    jobs.sort(key=lambda j: j.submit_time)
    return TraceJobs(jobs, skipped)


def _parse_row(
    row, header, col, seen, line, source, skip_censored, req_col, tenant_column="tenant"
) -> TraceJob | None:
    if len(row) != len(header):
        raise TraceError(
            f"expected {len(header)} fields, got {len(row)}", source=source, line=line
        )

    def get(name: str, row: list[str] = row) -> str | None:
        i = col.get(name)
        return None if i is None else row[i]

    if skip_censored and "censored" in col:
        flag = (get("censored") or "").strip()
        if flag not in ("", "0", "1"):
            raise TraceError(
                f"expected 0 or 1, got {flag!r}", source=source, line=line, column="censored"
            )
        if flag == "1":
            return None
    job_id = (get("job_id") or "").strip()
    if not job_id:
        raise TraceError("missing value", source=source, line=line, column="job_id")
    if job_id in seen:
        raise TraceError(
            f"duplicate job_id {job_id!r} (first on line {seen[job_id]})",
            source=source,
            line=line,
            column="job_id",
        )
    submit = _number(get("submit_time"), source=source, line=line, column="submit_time")
    if submit < 0:
        raise TraceError(
            f"must be >= 0, got {submit:g}", source=source, line=line, column="submit_time"
        )
    duration = _number(get("duration"), source=source, line=line, column="duration")
    if duration <= 0:
        raise TraceError(
            f"must be > 0, got {duration:g}", source=source, line=line, column="duration"
        )
    gpus = _integer(get("num_gpus"), source=source, line=line, column="num_gpus")
    if gpus < 0:
        raise TraceError(
            f"must be >= 0, got {gpus}", source=source, line=line, column="num_gpus"
        )
    tenant = (get(tenant_column) or "").strip() or "default"
    prio_raw = get("priority")
    priority = 0
    if prio_raw is not None and prio_raw.strip():
        priority = _integer(prio_raw, source=source, line=line, column="priority")
    requested = None
    if req_col is not None and (get(req_col) or "").strip():
        requested = _number(get(req_col), source=source, line=line, column=req_col)
        if requested <= 0:
            raise TraceError(
                f"must be > 0, got {requested:g}", source=source, line=line, column=req_col
            )
    seen[job_id] = line  # only rows that parsed take their id
    return TraceJob(job_id, submit, duration, gpus, tenant, priority, requested)


def load_trace(
    path: str | os.PathLike,
    *,
    skip_censored: bool = True,
    strict: bool = False,
    tenant_column: str = "tenant",
) -> TraceJobs:
    """Load a trace file (``.csv`` or ``.csv.gz``); see ``parse_trace``."""
    source = os.path.basename(os.fspath(path))
    try:
        with _open_text(path) as fh:
            return parse_trace(
                fh,
                source=source,
                skip_censored=skip_censored,
                strict=strict,
                tenant_column=tenant_column,
            )
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise TraceError("file not found", source=os.fspath(path)) from exc
        raise TraceError(f"cannot read file: {exc}", source=source) from exc


def load_vc_nodes(path: str | os.PathLike) -> dict[str, int]:
    """Philly-style ``vc,node num`` file -> {tenant: number of nodes}."""
    source = os.path.basename(os.fspath(path))
    out: dict[str, int] = {}
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or len(header) < 2:
            raise TraceError("expected a header 'vc,node num'", source=source, line=1)
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) < 2 or not row[0].strip():
                raise TraceError(
                    "expected two fields: vc, node count",
                    source=source,
                    line=line,
                    column=header[0].strip(),
                )
            n = _integer(row[1], source=source, line=line, column=header[1].strip())
            if n < 0:
                raise TraceError(
                    f"must be >= 0, got {n}", source=source, line=line, column=header[1].strip()
                )
            out[row[0].strip()] = n
    return out


def window(jobs: list[TraceJob], start: int, count: int) -> list[TraceJob]:
    """A contiguous slice of jobs, with submit times shifted so the first one is at 0."""
    part = jobs[start : start + count]
    if not part:
        return []
    t0 = part[0].submit_time
    return [
        TraceJob(
            j.job_id, j.submit_time - t0, j.duration, j.num_gpus, j.tenant, j.priority, j.requested
        )
        for j in part
    ]


# --------------------------------------------------------------------------- trace jobs as requests


def gang_split(n: int, node_gpus: int) -> tuple[int, int]:
    """(workers, GPUs per worker) of an ``n``-GPU job on nodes of ``node_gpus``."""
    if n <= node_gpus or node_gpus <= 0:
        return 1, n
    for d in range(node_gpus, 0, -1):
        if n % d == 0:
            return n // d, d
    return n, 1


ESTIMATES = ("realistic", "user", "oracle", "none")
# Standard walltime limits a user picks from (seconds): 15 min ... 7 days.
USER_LIMITS_S = (900, 1800, 3600, 7200, 14_400, 28_800, 43_200, 86_400, 172_800, 259_200, 604_800)
USER_MEDIAN_FACTOR = 12.0
USER_SIGMA = 2.5


def user_estimate(duration: float, job_id: str, seed: int = 0) -> float:
    """The user-estimate model (see the module docstring): a standard limit >= a noisy guess."""
    rng = random.Random(f"{seed}:{job_id}")
    guess = duration * math.exp(rng.gauss(math.log(USER_MEDIAN_FACTOR), USER_SIGMA))
    for limit in USER_LIMITS_S:
        if limit >= guess:
            return float(limit)
    return float(USER_LIMITS_S[-1])


def to_requests(
    trace_jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    *,
    estimate: str = "realistic",
    seed: int = 0,
) -> list[tuple[JobRequest, float]]:
    """Trace jobs -> (JobRequest, run time) gangs for this cluster's node size.

    The run time is the trace duration, cut to the estimate where the estimate is a limit the
    job would be killed at (``realistic`` / ``user``)."""
    if estimate not in ESTIMATES:
        raise ValueError(
            f"unknown estimate model {estimate!r}: use {', '.join(ESTIMATES)}"
        )
    big = max(nodes, key=lambda n: (n.gpus, n.cpus, n.memory_mb)) if nodes else None
    node_gpus = big.gpus if big else 8
    cpg = (big.cpus / big.gpus) if big and big.gpus else 4.0
    mpg = (big.memory_mb // big.gpus) if big and big.gpus else 16_384
    out = []
    for tj in trace_jobs:
        workers, gpw = gang_split(tj.num_gpus, node_gpus)
        if gpw == 0:
            cpus, mem = 1.0, 1024
        else:
            cpus, mem = math.floor(cpg * gpw), int(mpg * gpw)
        run = tj.duration
        if estimate == "oracle":
            est: float | None = tj.duration
        elif estimate in ("realistic", "user"):
            requested = getattr(tj, "requested", None)
            if estimate == "realistic" and requested is not None:
                est = float(requested)
            else:
                est = user_estimate(tj.duration, str(tj.job_id), seed)
            run = min(run, est)  # killed at the limit
        else:
            est = None
        req = JobRequest(
            str(tj.job_id), tj.tenant, tj.priority, tj.submit_time, workers, gpw, cpus, mem, est
        )
        out.append((req, run))
    return out


# --------------------------------------------------------------------------- a synthetic trace


def synthetic_trace(
    n_jobs: int = 1000, *, seed: int = 0, cluster_gpus: int = 64, load: float = 1.1
) -> tuple[list[TraceJob], dict[str, Quota]]:
    """A trace shaped like the held-out lab trace of issue 40, and its quotas: 18 tenants on
    ``cluster_gpus`` GPUs. ``flood`` (16 GPUs guaranteed) submits about 65% of the jobs, all
    1-GPU, median 15 min, in bursts (a burst of ~30 jobs about 20 s apart); four ``gang-*``
    tenants (8 guaranteed each) submit few jobs, half of them 8- or 16-GPU gangs of median
    3 h; six ``lab-*`` tenants (2 guaranteed each) and seven ``guest-*`` tenants (none, best
    effort) submit 1-4 GPU jobs of median 1 h. Every tenant may borrow up to half the
    cluster. Durations are log-normal, capped at 7 days; submit times spread so the offered
    GPU time is ``load`` x the cluster over the span. Seeded and deterministic: the same
    arguments give the same jobs."""
    rng = random.Random(f"synthetic:{seed}")
    gangs = [f"gang-{c}" for c in "abcd"]
    labs = [f"lab-{i}" for i in range(1, 7)]
    guests = [f"guest-{i}" for i in range(1, 8)]
    guaranteed = {"flood": 16, **dict.fromkeys(gangs, 8), **dict.fromkeys(labs, 2),
                  **dict.fromkeys(guests, 0)}
    borrow = cluster_gpus // 2
    quotas = {t: Quota(t, min(g, cluster_gpus), borrow) for t, g in guaranteed.items()}

    def lognormal(median: float, sigma: float) -> float:
        return min(max(median * math.exp(rng.gauss(0.0, sigma)), 30.0), 604_800.0)

    drafts: list[tuple[str, int, float]] = []  # (tenant, GPUs, duration)
    for _ in range(n_jobs):
        u = rng.random()
        if u < 0.65:
            drafts.append(("flood", 1, lognormal(900.0, 1.5)))
        elif u < 0.77:
            tenant = rng.choice(gangs)
            if rng.random() < 0.5:
                drafts.append((tenant, rng.choice((8, 16)), lognormal(10_800.0, 1.2)))
            else:
                drafts.append((tenant, rng.choice((1, 2, 4)), lognormal(3600.0, 1.5)))
        else:
            tenant = rng.choice(labs + guests)
            drafts.append((tenant, rng.choice((1, 1, 2, 4)), lognormal(3600.0, 1.5)))
    span = sum(g * d for _, g, d in drafts) / (cluster_gpus * load)
    times: list[float] = []
    burst_left, t_burst = 0, 0.0
    for tenant, _, _ in drafts:
        if tenant == "flood":
            if burst_left == 0:
                burst_left = 1 + int(rng.expovariate(1 / 30))
                t_burst = rng.uniform(0.0, span)
            t_burst += rng.expovariate(1 / 20)
            burst_left -= 1
            times.append(t_burst)
        else:
            times.append(rng.uniform(0.0, span))
    jobs = [
        TraceJob(f"s{seed}-{i}", round(t, 1), round(d, 1), g, tenant)
        for i, ((tenant, g, d), t) in enumerate(zip(drafts, times, strict=True))
    ]
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    t0 = jobs[0].submit_time if jobs else 0.0
    return [TraceJob(j.job_id, j.submit_time - t0, j.duration, j.num_gpus, j.tenant)
            for j in jobs], quotas
