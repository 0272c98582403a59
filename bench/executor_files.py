"""The cost of reading a job's files through descriptors (executor/safefs.py, issue 38).

Uploads the same checkpoint folder and outputs folder with the executor of a baseline
revision (files checked by name, then reopened by name) and with this checkout's (every
file opened beneath the workdir's descriptor with openat2, fstat'ed, hashed and uploaded
from descriptors), alternating the two in fresh processes on the same files. The server
is a sink that reads every byte (what an upload costs on the executor's side), so the
figure is the file path's own cost, not the network's.

    python bench/executor_files.py [--baseline REV] [--rounds N]

Writes bench/results/executor_files.json: per shape and side, p50/p99 wall seconds, MB/s
and CPU seconds (user + system, steadier on a busy machine), and the ratios of this
checkout's throughput to the baseline's (goal: >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import percentile

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {  # name: (files, bytes each)
    "checkpoint 1 x 256 MiB": (1, 256 << 20),
    "checkpoint 64 x 4 MiB": (64, 4 << 20),
    "outputs 2,000 x 16 KiB": (2000, 16 << 10),
}

ONE_RUN = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from executor.checkpoints import CheckpointAgent
from executor.outputs import upload_outputs

class Sink:
    deadline = None
    fatal = None
    def url(self, p): return p
    def json(self, method, path, body=None, **kw):
        if path == "checkpoints":
            return {"id": 1, "state": "pending", "missing": [f["path"] for f in body["files"]]}
        return {}
    def put_file(self, path, source, size, headers):
        fh = open(source, "rb") if isinstance(source, str) else source()
        with fh:
            while fh.read(1 << 20):
                pass

work, kind = sys.argv[2], sys.argv[3]
start = time.perf_counter()
if kind == "checkpoint":
    agent = CheckpointAgent(Sink(), work, 0, lambda m: None, None)
    agent.done.clear()
    agent.scan()
else:
    upload_outputs(Sink(), 0, work, work + "/outputs", lambda m: None)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps([wall, usage.ru_utime + usage.ru_stime]))
"""


def baseline_tree(rev: str, into: Path) -> Path:
    """The executor package as it was at `rev`, beside this checkout's."""
    pkg = into / "executor"
    pkg.mkdir(parents=True)
    names = subprocess.run(["git", "ls-tree", "--name-only", rev, "executor/"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if name.endswith(".py"):
            blob = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT, capture_output=True, check=True)
            (into / name).write_bytes(blob.stdout)
    return into


def make_workdir(base: Path, files: int, size: int) -> Path:
    work = base / "work"
    (work / ".gantry").mkdir(parents=True)
    folder = work / "checkpoints" / "step-1"
    folder.mkdir(parents=True)
    (work / "outputs").mkdir()
    block = os.urandom(size)
    for i in range(files):
        sub = f"{i % 16:02d}"
        (folder / sub).mkdir(exist_ok=True)
        (folder / sub / f"f{i}.bin").write_bytes(block)
        (work / "outputs" / sub).mkdir(exist_ok=True)
        os.link(folder / sub / f"f{i}.bin", work / "outputs" / sub / f"f{i}.bin")
    (folder / ".complete").write_text("{}")
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="af91ee7", help="revision before the descriptor file path")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    results = {"baseline": args.baseline, "rounds": args.rounds, "shapes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sides = {"baseline": str(baseline_tree(args.baseline, tmp / "baseline")), "descriptors": str(ROOT)}
        for shape, (files, size) in SHAPES.items():
            kind = "checkpoint" if shape.startswith("checkpoint") else "outputs"
            work = make_workdir(tmp / shape.replace(" ", "_"), files, size)
            times: dict[str, list[float]] = {side: [] for side in sides}
            cpu: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, path in sides.items():  # alternated, on warm page cache
                    out = subprocess.run([sys.executable, "-c", ONE_RUN, path, str(work), kind],
                                         capture_output=True, text=True, check=True)
                    wall, used = json.loads(out.stdout)
                    times[side].append(wall)
                    cpu[side].append(used)
            mb = files * size / 1e6
            row = {}
            for side, values in times.items():
                p50 = percentile(values, 50)
                row[side] = {"p50_s": round(p50, 4), "p99_s": round(percentile(values, 99), 4),
                             "mb_per_s_p50": round(mb / p50, 1),
                             "cpu_p50_s": round(percentile(cpu[side], 50), 4)}
            row["throughput_ratio"] = round(row["baseline"]["p50_s"] / row["descriptors"]["p50_s"], 3)
            # CPU seconds (user + system) of the uploading process: what the file path costs
            # whatever else the machine is doing; wall time moves with the machine's load.
            row["cpu_ratio"] = round(row["baseline"]["cpu_p50_s"] / row["descriptors"]["cpu_p50_s"], 3)
            results["shapes"][shape] = row
            print(shape, json.dumps(row))
    out = ROOT / "bench" / "results" / "executor_files.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
