#!/usr/bin/env python
"""The admission pass against the database when a long queue moves, at a git ref and at
the working tree, side by side (issue 43 moved a queued job's position and estimated start
from `Job` into a one-to-one `JobScheduling` row).

    python bench/admission_queue.py --before-ref ee44601~1 --queued 2000 --moves 15 \\
        --out bench/results/admission_queue.json

Each side runs in a fresh process in its own checkout (a `git worktree` of the ref; the
working tree itself), on a fresh SQLite database migrated there: one tenant, 4 fake GPUs,
a running job holding them and `--queued` jobs of 4 GPUs waiting behind it. Timed:
- `first`: the pass that places the whole queue (every position written);
- `move`: the head of the queue is cancelled, then a pass: every job behind it moves up
  one place (`--moves` times; p50/p99);
- `still`: a pass where nothing changed (nothing written).
Rounds alternate which side goes first. On a shared machine compare the CPU columns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def inner(queued: int, moves: int) -> dict:
    """One side, in this process (cwd: the checkout; its settings)."""
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings

    settings.GANTRY_LOCAL_FAKE_GPUS = 4  # no GPU here: the tests' stand-in (a setting, not env)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    from accounts.models import Tenant
    from jobs.models import Job
    from jobs.states import JobState, transition
    from projects.models import Project
    from scheduling.admission import admission_pass

    user = get_user_model().objects.create_user("bench", password="x")
    tenant = Tenant.objects.create(name="Lab", slug="lab")
    project = Project.objects.create(tenant=tenant, name="P", slug="p")
    spec = {"project": project, "created_by": user, "command": "true", "gpus": 4, "cpus": 1}
    blocker = Job.objects.create(name="blocker", **spec)
    admitted = admission_pass()
    blocker.refresh_from_db()
    assert [j.pk for j in admitted] == [blocker.pk], blocker.state_reason
    now = timezone.now()
    Job.objects.bulk_create(
        [Job(name=f"q{i}", created_at=now, queued_at=now, **spec) for i in range(queued)]
    )

    def timed() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        assert admission_pass() == []
        return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000

    first = timed()
    move = []
    for _ in range(moves):
        head = Job.objects.filter(state=JobState.QUEUED).order_by("created_at", "pk").first()
        transition(head, JobState.CANCELLED, "bench")
        move.append(timed())
    still = [timed() for _ in range(5)]

    def summary(samples):
        walls = sorted(s[0] for s in samples)
        cpus = sorted(s[1] for s in samples)
        pick = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
        return {"p50_ms": round(statistics.median(walls), 1), "p99_ms": round(pick(walls, 0.99), 1),
                "cpu_p50_ms": round(statistics.median(cpus), 1), "n": len(samples)}

    return {"first": summary([first]), "move": summary(move), "still": summary(still)}


def run_side(checkout: str, queued: int, moves: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="gantry-admission-") as data:
        env = {**os.environ, "GANTRY_DATA_DIR": data,
               "DJANGO_DEBUG": "0", "SECRET_KEY": "bench-" + "x" * 50}
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        out = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", "admission_queue.py"), "--inner",
             "--queued", str(queued), "--moves", str(moves)],
            cwd=checkout, env=env, check=True, capture_output=True, text=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-ref", default="ee44601~1")
    parser.add_argument("--queued", type=int, default=2000)
    parser.add_argument("--moves", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inner", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "admission_queue.json"))
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(inner(args.queued, args.moves)))
        return
    worktree = tempfile.mkdtemp(prefix="gantry-before-")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", worktree, args.before_ref],
                   check=True, capture_output=True)
    try:
        rounds = []
        for i in range(args.rounds):
            order = [("before", worktree), ("after", ROOT)]
            if i % 2:
                order.reverse()
            rounds.append({name: run_side(path, args.queued, args.moves) for name, path in order})
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", worktree], check=False)

    def median_of(side, case, key):
        return statistics.median(r[side][case][key] for r in rounds)

    result = {
        "what": "admission pass with a long queue moving: before (position/ETA on Job) vs after "
                "(JobScheduling row), same machine, same run",
        "before_ref": args.before_ref, "queued": args.queued, "moves": args.moves,
        "rounds": rounds,
        "median": {
            case: {
                side: {key: median_of(side, case, key) for key in ("p50_ms", "cpu_p50_ms")}
                for side in ("before", "after")
            }
            for case in ("first", "move", "still")
        },
    }
    for case in ("first", "move", "still"):
        m = result["median"][case]
        result["median"][case]["after_over_before_cpu"] = round(
            m["after"]["cpu_p50_ms"] / m["before"]["cpu_p50_ms"], 2
        )
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result["median"], indent=2))


if __name__ == "__main__":
    main()
