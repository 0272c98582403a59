"""Code snapshot upload of a 2,000-file, 50 MB tree (httpx, a bearer token): the first
upload (hash every file, POST the manifest, PUT the missing contents 8 at a time, finalize;
and again, every file changed, with the missing contents in ~4 MB tars, POST
/snapshots/<id>/blobs; and again through the CLI's own code, `gantry_cli.snapshot`, as
`gantry run` sends it: tar batches streamed, 4 in flight) beside a raw `tar | upload` of the same tree (one tar
built in memory, one POST to the dataset archive endpoint), and the second, unchanged
upload (hash, one POST: nothing missing, ready at once), by hand and by the CLI's code.

Starts its own Gantry (gunicorn with threads, as production serves the API, over a fresh
SQLite database and filesystem storage in a temporary folder). Writes bench/results/snapshot_upload.json.
Sizes: BENCH_SNAPSHOT_FILES (default 2000), BENCH_SNAPSHOT_MB (default 50); the database:
BENCH_DATABASE_URL (an empty PostgreSQL database; default a SQLite file), e.g.
`createdb -h 127.0.0.1 -U postgres gantry_bench_snapshot` and
`BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/gantry_bench_snapshot`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import free_port  # noqa: E402

FILES = int(os.environ.get("BENCH_SNAPSHOT_FILES", "2000"))
SIZE_MB = int(os.environ.get("BENCH_SNAPSHOT_MB", "50"))
PARALLEL = 8
# An empty PostgreSQL database to use (the production database); else a fresh SQLite file,
# where 16 writing threads in two processes sometimes meet "disk I/O error" under load.
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "")
PY = sys.executable
RESULTS = ROOT / "bench" / "results" / "snapshot_upload.json"


def make_tree(root: Path) -> int:
    """FILES files in 40 folders, sizes spread around the mean, SIZE_MB in all."""
    rng = random.Random(1)
    total = SIZE_MB * 1024 * 1024
    weights = [rng.uniform(0.2, 1.8) for _ in range(FILES)]
    scale = total / sum(weights)
    written = 0
    for i, w in enumerate(weights):
        path = root / f"pkg{i % 40:02d}" / f"module_{i:04d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = int(w * scale)
        path.write_bytes(os.urandom(size))
        written += size
    return written


def manifest(root: Path) -> tuple[list[dict], dict[str, Path]]:
    files, by_sha = [], {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        files.append({"path": str(path.relative_to(root)), "size": len(data), "sha256": sha,
                      "mode": 0o644})  # fmt: skip
        by_sha[sha] = path
    return files, by_sha


BATCH_BYTES = 4 * 1024 * 1024  # small files travel in tars of about this size


def batches(missing: list[str], by_sha: dict[str, Path]) -> list[list[str]]:
    out, current, size = [], [], 0
    for sha in missing:
        current.append(sha)
        size += by_sha[sha].stat().st_size
        if size >= BATCH_BYTES:
            out.append(current)
            current, size = [], 0
    return out + ([current] if current else [])


def tar_of(shas: list[str], by_sha: dict[str, Path]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for sha in shas:
            tar.add(by_sha[sha], arcname=sha)
    return buffer.getvalue()


def snapshot_upload(http: httpx.Client, project: int, root: Path, batched: bool = False) -> dict:
    """The CLI's protocol; returns timings and how many requests it took. `batched` sends
    the missing contents as tars (POST /snapshots/<id>/blobs), else one PUT each."""
    t0 = time.perf_counter()
    files, by_sha = manifest(root)
    hashed = time.perf_counter()
    created = http.post("/api/v1/snapshots/", json={"project": project, "files": files, "git": None})
    created.raise_for_status()
    body = created.json()
    listed = time.perf_counter()

    def put(sha: str) -> None:
        r = http.put(f"/api/v1/snapshots/{body['id']}/blobs/{sha}", content=by_sha[sha].read_bytes(),
                     headers={"Content-Type": "application/octet-stream"})  # fmt: skip
        r.raise_for_status()

    def post(shas: list[str]) -> None:
        r = http.post(f"/api/v1/snapshots/{body['id']}/blobs", content=tar_of(shas, by_sha),
                      headers={"Content-Type": "application/x-tar"})  # fmt: skip
        r.raise_for_status()

    work = batches(body["missing"], by_sha) if batched else body["missing"]
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(post if batched else put, work))
    requests = 1 + len(work)
    if body["state"] != "ready":
        done = http.post(f"/api/v1/snapshots/{body['id']}/finalize")
        done.raise_for_status()
        assert done.json()["state"] == "ready"
        requests += 1
    end = time.perf_counter()
    return {
        "seconds": round(end - t0, 3),
        "hash_seconds": round(hashed - t0, 3),
        "manifest_post_seconds": round(listed - hashed, 3),
        "blob_put_seconds": round(end - listed, 3),
        "requests": requests,
        "blobs_sent": len(body["missing"]),
    }


def cli_upload(base: str, token: str, project: int, root: Path) -> dict:
    """The CLI's own code path (`gantry run` without the job): collect, hash, upload."""
    from gantry_cli import snapshot
    from gantry_cli.sdk import Gantry

    g = Gantry(base, token)
    try:
        t0 = time.perf_counter()
        tree = snapshot.collect(root)
        snapshot.hash_files(tree)
        hashed = time.perf_counter()
        done = snapshot.upload(g, project, tree, None)
        end = time.perf_counter()
    finally:
        g.close()
    assert done.snapshot["state"] == "ready"
    return {
        "seconds": round(end - t0, 3),
        "hash_seconds": round(hashed - t0, 3),
        "upload_seconds": round(end - hashed, 3),
        "requests": done.requests,
        "tar_batches": done.batches,
        "puts": done.puts,
        "blobs_sent": done.blobs_sent,
    }


def tar_upload(http: httpx.Client, dataset: int, root: Path) -> dict:
    t0 = time.perf_counter()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(root, arcname=".")
    built = time.perf_counter()
    r = http.post(f"/api/v1/datasets/{dataset}/archive/",
                  files={"archive": ("tree.tar", buffer.getvalue(), "application/x-tar")},
                  data={"parent": "latest"})  # fmt: skip
    r.raise_for_status()
    end = time.perf_counter()
    return {"seconds": round(end - t0, 3), "tar_seconds": round(built - t0, 3),
            "upload_seconds": round(end - built, 3), "bytes": buffer.tell(), "requests": 1}  # fmt: skip


def start_gantry(work: Path) -> tuple[subprocess.Popen, str, str, int, int]:
    env = {**os.environ, "GANTRY_DATA_DIR": str(work / "var"), "LOG_LEVEL": "WARNING",
           "DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1", "GANTRY_ENV": "development",
           "DATABASE_URL": DATABASE_URL or f"sqlite:///{work / 'db.sqlite3'}?timeout=20"}  # fmt: skip
    run = lambda *a: subprocess.run([PY, "manage.py", *a], cwd=ROOT, env=env, check=True,  # noqa: E731
                                    capture_output=True, text=True).stdout  # fmt: skip
    run("migrate", "--noinput")
    setup = (
        "from django.contrib.auth import get_user_model;"
        "from accounts import services as a; from projects import services as p;"
        "from datasets.services import catalog as d;"
        "u=get_user_model().objects.create_user('bench', password='x');"
        "t=a.create_tenant(actor=u, name='Bench', slug='bench');"
        "pr=p.create_project(actor=u, tenant=t, name='B', slug='b');"
        "ds=d.create_dataset(u, pr, name='Tar');"
        "_,k=a.create_api_token(actor=u, name='b', scope='write');"
        "print('BENCH', pr.pk, ds.pk, k)"
    )
    line = [x for x in run("shell", "-c", setup).splitlines() if x.startswith("BENCH")][-1]
    _, project, dataset, token = line.split()
    port = free_port()
    server = subprocess.Popen(
        [PY, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}",
         "-k", "gthread", "-w", "2", "--threads", str(PARALLEL)],
        cwd=ROOT, env=env, stdout=open(work / "server.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            httpx.get(base + "/healthz", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    return server, base, token, int(project), int(dataset)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="gantry-bench-snapshot-"))
    tree = work / "tree"
    total = make_tree(tree)
    server, base, token, project, dataset = start_gantry(work)
    try:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=300,
                          limits=httpx.Limits(max_connections=PARALLEL)) as http:  # fmt: skip
            http.get("/api/v1/snapshots/").raise_for_status()  # warm up
            first = snapshot_upload(http, project, tree)
            tar = tar_upload(http, dataset, tree)
            second = snapshot_upload(http, project, tree)
            # The same tree, other contents (one byte more per file), sent in tars.
            for path in tree.rglob("*.py"):
                path.write_bytes(path.read_bytes() + b"\n")
            batched = snapshot_upload(http, project, tree, batched=True)
            for path in tree.rglob("*.py"):
                path.write_bytes(path.read_bytes() + b"\n")
            cli_first = cli_upload(base, token, project, tree)
            cli_second = cli_upload(base, token, project, tree)
    finally:
        server.terminate()
        server.wait(20)
    result = {
        "benchmark": "snapshot_upload",
        "files": FILES,
        "bytes": total,
        "parallel_puts": PARALLEL,
        "server": f"gunicorn gthread (2 workers x {PARALLEL} threads, as in production), "
        f"{'PostgreSQL' if DATABASE_URL else 'SQLite (WAL)'}, filesystem storage, loopback",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_1min": round(os.getloadavg()[0], 2)},  # fmt: skip
        "first_upload_one_put_per_file": first,
        "tar_then_single_upload": tar,
        "second_unchanged_upload": second,
        "first_upload_batched_tars": batched,
        "first_upload_cli": cli_first,
        "second_unchanged_upload_cli": cli_second,
        "note": "goal: the unchanged upload under 1 s plus one round trip per 1,000 files; "
        "here the whole manifest is one request (requests counts them); on a shared machine "
        "(load_1min) compare the rows of one run, not runs",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
