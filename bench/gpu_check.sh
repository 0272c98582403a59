#!/usr/bin/env bash
# GPU check (issue 26), for a machine with at least two NVIDIA GPUs, the driver, and torch
# with CUDA in Gantry's virtualenv (`pip install -e '.[examples]'`):
#
#     bench/gpu_check.sh [--seconds 40] [--out bench/results/gpu_check.json]
#
# Runs a 2-GPU DDP job over NCCL through Gantry's local backend (a fresh SQLite data
# directory, a real uvicorn serving the executor API, real `python -m executor` workers,
# each given one GPU by CUDA_VISIBLE_DEVICES) and prints the NVML samples the executors
# shipped while it ran: per worker and GPU, utilization, memory, power and temperature,
# first while the workers multiply matrices and all-reduce them over NCCL, then while they
# sleep (utilization should fall to ~0), and the job's allocated and used GPU-seconds as
# the usage report counts them. Nothing here is faked: no GANTRY_LOCAL_FAKE_GPUS.
#
# Written without a GPU machine at hand (the sessions that built it had none): it has
# not run on real GPUs yet. Rehearsed once on a machine without them, with the fake NVML
# of tests/telemetry (two scripted GPUs, found by UUID), a stub nvidia-smi, and gloo on the
# CPU in place of NCCL and CUDA: both workers sampled their own GPU and the job's usage was
# reported. It checks its prerequisites first and says which one is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SECONDS_BUSY=40
OUT=bench/results/gpu_check.json
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_BUSY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "usage: $0 [--seconds N] [--out FILE]" >&2; exit 2 ;;
    esac
done

command -v nvidia-smi >/dev/null || { echo "gpu_check: nvidia-smi not found: no NVIDIA driver here" >&2; exit 1; }
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
[ "$gpus" -ge 2 ] || { echo "gpu_check: needs 2 GPUs, this machine has $gpus" >&2; exit 1; }
"$PY" -c 'import pynvml' 2>/dev/null || { echo "gpu_check: nvidia-ml-py is not installed in $PY's environment" >&2; exit 1; }
"$PY" - <<'EOF' || { echo "gpu_check: torch with CUDA and NCCL is required (pip install -e '.[examples]')" >&2; exit 1; }
import torch, torch.distributed as dist
assert torch.cuda.is_available() and torch.cuda.device_count() >= 2, "CUDA"
assert dist.is_nccl_available(), "NCCL"
EOF
nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv

# The job's script lives apart from Gantry's data: jobs may read the first, never the second.
WORK=$(mktemp -d /tmp/gantry-gpu-check-XXXXXX)
DATA=$(mktemp -d /tmp/gantry-gpu-check-data-XXXXXX)
chmod 755 "$WORK"
trap 'rm -rf "$WORK" "$DATA"' EXIT
cat > "$WORK/ddp_busy.py" <<'EOF'
"""Both workers: matmuls and NCCL all-reduces for BUSY seconds, then sleep IDLE seconds."""
import os
import time

import torch
import torch.distributed as dist

from executor import log_metric

busy, idle = float(os.environ["BUSY"]), float(os.environ["IDLE"])
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(0)  # each worker sees only its own GPU (CUDA_VISIBLE_DEVICES)
a = torch.randn(8192, 8192, device="cuda")
print(f"rank {rank}/{dist.get_world_size()} on {torch.cuda.get_device_name(0)} "
      f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})", flush=True)
step, end = 0, time.time() + busy
while time.time() < end:
    b = a @ a
    dist.all_reduce(b)
    torch.cuda.synchronize()
    step += 1
    if step % 20 == 0:
        log_metric("steps", step, step=step)
print(f"rank {rank}: {step} steps busy; now idle for {idle:g} s", flush=True)
dist.barrier()
time.sleep(idle)
dist.destroy_process_group()
EOF

PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export GANTRY_DATA_DIR="$DATA" GANTRY_URL="http://127.0.0.1:$PORT" GANTRY_ENV=development
export DEBUG=false LOG_LEVEL=WARNING GANTRY_GPU_SAMPLE_SECONDS=1
export GANTRY_JOB_READ_ONLY_PATHS="$PWD/examples,$WORK"
export GPU_CHECK_WORK="$WORK" GPU_CHECK_BUSY="$SECONDS_BUSY" GPU_CHECK_OUT="$OUT"
"$PY" manage.py migrate --noinput -v0
"$PY" -m uvicorn config.asgi:application --host 127.0.0.1 --port "$PORT" \
    --no-access-log --lifespan off --log-level warning &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$WORK" "$DATA"' EXIT

"$PY" - <<'EOF'
import json
import os
import statistics
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

for _ in range(600):
    try:
        urllib.request.urlopen(os.environ["GANTRY_URL"] + "/healthz", timeout=2).close()
        break
    except OSError:
        time.sleep(0.1)
sys.path.insert(0, ".")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django

django.setup()
from django.contrib.auth import get_user_model

from accounts import services as account_services
from jobs.models import Job, MetricPoint
from jobs.services.submit import submit_job
from jobs.tasks import reconcile
from projects import services as project_services
from scheduling import tasks
from telemetry.services import refresh_usage
from telemetry.usage import build_report

work, busy = Path(os.environ["GPU_CHECK_WORK"]), float(os.environ["GPU_CHECK_BUSY"])
idle = 20.0
user = get_user_model().objects.create_user("gpucheck", password="gpu-check-password-1")
tenant = account_services.create_tenant(actor=user, name="GPU check", slug="gpu-check")
project = project_services.create_project(actor=user, tenant=tenant, name="DDP", slug="ddp")
job = submit_job(
    user, project, name="ddp-nccl", kind="distributed", workers=2, gpus=1, memory_mb=4096,
    command=f"python {work / 'ddp_busy.py'}", env={"BUSY": str(busy), "IDLE": str(idle),
    "NCCL_DEBUG": "WARN"}, timeout_seconds=int(busy + idle + 600),
)
started = time.time()
while True:
    tasks.admit_and_launch()
    reconcile()
    job.refresh_from_db()
    if job.is_terminal:
        break
    if time.time() - started > busy + idle + 900:
        raise SystemExit(f"job {job.pk} still {job.state} ({job.state_reason})")
    time.sleep(1)
print(f"job #{job.pk}: {job.state} ({job.state_reason}); placement {job.placement.get('gpus')}")
if job.state != "succeeded":
    from jobs.models import LogChunk

    for chunk in LogChunk.objects.filter(job=job).order_by("worker", "first_seq"):
        for line in chunk.lines()[-40:]:
            print(f"  w{chunk.worker} {line['stream']}: {line['text']}")

running_at = job.events.filter(to_state="running").values_list("at", flat=True).first()
points = MetricPoint.objects.filter(job=job, name__startswith="gpu").order_by("ts")
series = defaultdict(list)
for p in points:
    phase = "busy" if running_at and (p.ts - running_at).total_seconds() < busy else "idle"
    series[(p.worker, p.name, phase)].append(p.value)
rows = []
for (worker, name, phase), values in sorted(series.items()):
    rows.append({
        "worker": worker, "metric": name, "phase": phase, "samples": len(values),
        "mean": round(statistics.fmean(values), 1), "max": max(values), "min": min(values),
    })
print(f"{'worker':>6} {'metric':<22} {'phase':<5} {'samples':>7} {'mean':>8} {'min':>8} {'max':>8}")
for r in rows:
    print(f"{r['worker']:>6} {r['metric']:<22} {r['phase']:<5} {r['samples']:>7} "
          f"{r['mean']:>8} {r['min']:>8} {r['max']:>8}")
refresh_usage(job_ids=[job.pk])
report = build_report(Job.objects.filter(pk=job.pk), job.created_at.date(),
                      job.finished_at.date(), group="project", period="day")
usage = [r.as_dict() for r in report]
print("usage report:", json.dumps(usage, indent=1))
out = Path(os.environ["GPU_CHECK_OUT"])
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({
    "benchmark": "2-GPU DDP over NCCL through the local backend; NVML as the executors saw it",
    "job": {"state": job.state, "reason": job.state_reason, "busy_s": busy, "idle_s": idle},
    "samples": rows, "usage": usage,
}, indent=2) + "\n")
print(f"written {out}")
EOF
