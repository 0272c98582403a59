"""Command line entry point: ``python -m executor`` / ``gantry-executor``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence

from . import __version__
from .runner import EXIT_INTERNAL, Config, Runner
from .sandbox import SPEC_ENV, SandboxError, parse_spec

EXIT_USAGE = 64


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return float(raw)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gantry-executor",
        description="Gantry in-job agent: runs the job command and reports to the Gantry API.",
    )
    p.add_argument("--api-url", default=os.environ.get("GANTRY_API_URL"), help="env GANTRY_API_URL")
    p.add_argument(
        "--token", default=os.environ.get("GANTRY_JOB_TOKEN"), help="env GANTRY_JOB_TOKEN"
    )
    p.add_argument(
        "--token-file",
        default=os.environ.get("GANTRY_JOB_TOKEN_FILE") or None,
        help="a file holding the token, or a directory with one file per worker rank "
        "(a mounted Kubernetes Secret), env GANTRY_JOB_TOKEN_FILE",
    )
    p.add_argument("--job", default=os.environ.get("GANTRY_JOB_ID"), help="env GANTRY_JOB_ID")
    p.add_argument(
        "--worker",
        type=int,
        default=None,
        help="worker rank, env GANTRY_WORKER_RANK (default 0)",
    )
    p.add_argument(
        "--workdir",
        default=os.environ.get("GANTRY_WORKDIR") or None,
        help="env GANTRY_WORKDIR (default: a new temporary directory)",
    )
    p.add_argument(
        "--final-flush-seconds",
        type=float,
        default=None,
        help="how long to keep retrying delivery after the command exits, "
        "env GANTRY_FINAL_FLUSH_SECONDS (default 300)",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def read_token_file(path: str, worker: int) -> str:
    """The token in `path`, or in `path/<worker>` when `path` is a directory: the pods of
    a Kubernetes Indexed Job share one template, so each picks its rank's key."""
    if os.path.isdir(path):
        path = os.path.join(path, str(worker))
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


def _worker_rank(args) -> int:
    return (
        args.worker if args.worker is not None else int(os.environ.get("GANTRY_WORKER_RANK") or 0)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.token and args.token_file:
        try:
            args.token = read_token_file(args.token_file, _worker_rank(args))
        except (OSError, ValueError) as exc:
            print(f"gantry-executor: error: cannot read the token file: {exc}", file=sys.stderr)
            return EXIT_USAGE
    missing = [
        opt
        for opt, value in (
            ("--api-url", args.api_url),
            ("--token", args.token),
            ("--job", args.job),
        )
        if not value
    ]
    if missing:
        parser.print_usage(sys.stderr)
        print(
            f"gantry-executor: error: missing {', '.join(missing)} (or the env vars)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        worker = _worker_rank(args)
        flush = (
            args.final_flush_seconds
            if args.final_flush_seconds is not None
            else _env_float("GANTRY_FINAL_FLUSH_SECONDS", 300.0)
        )
        box = parse_spec(os.environ.get(SPEC_ENV))
    except (ValueError, SandboxError) as exc:
        print(f"gantry-executor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if box is not None and os.geteuid() != 0:
        print(
            f"gantry-executor: error: {SPEC_ENV} asks for a sandbox, which needs root "
            "(to hand the job a user of its own)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    workdir = args.workdir or tempfile.mkdtemp(prefix=f"gantry-job-{args.job}-")
    cfg = Config(
        api_url=args.api_url,
        token=args.token,
        job_id=str(args.job),
        worker=worker,
        workdir=workdir,
        final_flush_seconds=max(0.0, flush),
        sandbox=box,
    )
    runner = Runner(cfg)
    runner.install_signal_handlers()
    try:
        return runner.run()
    except Exception:
        traceback.print_exc()
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
