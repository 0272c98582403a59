"""Dataset upload throughput: Gantry's browser path (presigned multipart, driven by the
same protocol as the upload page, 4 parts in flight) against raw boto3 multipart (4 in
flight) to the same Ceph RADOS Gateway, and the web server's CPU time per GB.

Writes bench/results/dataset_upload.json. Starts its own Ceph (tests/ceph.py) and its
own Gantry web server (a subprocess, so its CPU time can be read from /proc).
Size: BENCH_UPLOAD_MB (default 200; the issue asks 1 GB, but memstore keeps every
byte in RAM and these machines are small).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ceph import CephCluster, free_port  # noqa: E402

SIZE_MB = int(os.environ.get("BENCH_UPLOAD_MB", "200"))
PART_MB = 16
PARALLEL = 4
PY = sys.executable


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def manage(env, *args, **kw):
    return subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, **kw).stdout  # fmt: skip


def call(base, token, method, path, body=None):
    req = urllib.request.Request(base + "/api/v1/" + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None)  # fmt: skip
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read() or b"{}")


def put(url, data):
    req = urllib.request.Request(url, data=data, method="PUT")
    with urllib.request.urlopen(req, timeout=300) as resp:
        resp.read()
        return resp.headers.get("ETag", "")


def gantry_upload(base, token, dataset_id, path: Path, size: int) -> str:
    session = call(base, token, "POST", "uploads/",
                   {"dataset": dataset_id, "files": [{"path": "data.bin", "size": size}]})  # fmt: skip
    f = session["files"][0]
    part = session["part_size"]

    def send(n):
        with open(path, "rb") as fh:
            fh.seek((n - 1) * part)
            chunk = fh.read(part)
        url = call(base, token, "POST", f"uploads/{session['id']}/sign/",
                   {"file": f["id"], "numbers": [n]})["urls"][str(n)]  # fmt: skip
        etag = put(url, chunk)
        call(base, token, "POST", f"uploads/{session['id']}/complete-part/",
             {"file": f["id"], "number": n, "sha256": hashlib.sha256(chunk).hexdigest(), "etag": etag})  # fmt: skip

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(send, range(1, f["part_count"] + 1)))
    return str(session["id"])


def main() -> int:
    size = SIZE_MB * 1024 * 1024
    work = Path(tempfile.mkdtemp(prefix="gantry-bench-"))
    data = work / "data.bin"
    with open(data, "wb") as fh:
        for _ in range(SIZE_MB):
            fh.write(os.urandom(1024 * 1024))
    with CephCluster() as ceph:
        env = {
            **os.environ,
            "GANTRY_DATA_DIR": str(work / "var"),
            "GANTRY_STORAGE": "s3",
            "S3_ENDPOINT_URL": ceph.endpoint,
            "S3_BUCKET": "gantry-bench",
            "S3_ACCESS_KEY_ID": ceph.access_key,
            "S3_SECRET_ACCESS_KEY": ceph.secret_key,
            "GANTRY_UPLOAD_PART_MB": str(PART_MB),
            "GANTRY_TENANT_STORAGE_QUOTA_GB": "100",
            "LOG_LEVEL": "WARNING",
            "DEBUG": "false",
            "ALLOWED_HOSTS": "127.0.0.1",
        }
        manage(env, "migrate", "--noinput")
        setup = (
            "from django.contrib.auth import get_user_model;"
            "from accounts import services as a; from projects import services as p;"
            "from datasets import storage; from datasets.services import catalog as d;"
            "storage.configure_bucket(['http://127.0.0.1']);"
            "u=get_user_model().objects.create_user('bench', password='x');"
            "t=a.create_tenant(actor=u, name='Bench', slug='bench');"
            "pr=p.create_project(actor=u, tenant=t, name='B', slug='b');"
            "ds=d.create_dataset(u, pr, name='Bench');"
            "_,k=a.create_api_token(actor=u, name='b', scope='write');"
            "print('BENCH', ds.pk, k)"
        )
        line = [x for x in manage(env, "shell", "-c", setup).splitlines() if x.startswith("BENCH")]
        _, dataset_id, token = line[-1].split()
        port = free_port()
        server = subprocess.Popen(
            [PY, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(base + "/accounts/login/", timeout=1).read()
                    break
                except OSError:
                    time.sleep(0.2)
            import boto3
            from boto3.s3.transfer import TransferConfig

            s3 = boto3.client("s3", endpoint_url=ceph.endpoint, aws_access_key_id=ceph.access_key,
                              aws_secret_access_key=ceph.secret_key, region_name="us-east-1")  # fmt: skip
            config = TransferConfig(multipart_threshold=PART_MB * 1024 * 1024,
                                    multipart_chunksize=PART_MB * 1024 * 1024,
                                    max_concurrency=PARALLEL)  # fmt: skip
            t0 = time.perf_counter()
            s3.upload_file(str(data), "gantry-bench", "raw/data.bin", Config=config)
            raw_s = time.perf_counter() - t0
            s3.delete_object(Bucket="gantry-bench", Key="raw/data.bin")

            cpu0 = cpu_seconds(server.pid)
            t0 = time.perf_counter()
            session_id = gantry_upload(base, token, int(dataset_id), data, size)
            gantry_s = time.perf_counter() - t0
            cpu_upload = cpu_seconds(server.pid) - cpu0
            call(base, token, "POST", f"uploads/{session_id}/commit/")
            cpu_total = cpu_seconds(server.pid) - cpu0
        finally:
            server.terminate()
            server.wait()
        # The commit's verification (one streaming read of the object) runs in the worker.
        t0 = time.perf_counter()
        state = manage(env, "shell", "-c",
                       f"from datasets.services import commits; print(commits.finish_commit({session_id}).state)").strip().splitlines()[-1]  # fmt: skip
        commit_s = time.perf_counter() - t0
    gb = size / 1e9
    result = {
        "bytes": size,
        "note": f"{SIZE_MB} MB rather than 1 GB: the memstore OSD keeps all data in RAM",
        "part_mb": PART_MB,
        "parts_in_flight": PARALLEL,
        "raw_boto3_seconds": round(raw_s, 3),
        "raw_boto3_mb_per_s": round(size / 1e6 / raw_s, 1),
        "gantry_presigned_seconds": round(gantry_s, 3),
        "gantry_presigned_mb_per_s": round(size / 1e6 / gantry_s, 1),
        "gantry_vs_raw": round(raw_s / gantry_s, 3),
        "web_server_cpu_seconds_upload": round(cpu_upload, 3),
        "web_server_cpu_seconds_per_gb": round(cpu_total / gb, 3),
        "commit_state": state,
        "commit_worker_seconds_incl_django_start": round(commit_s, 3),
        "machine": {"cpus": os.cpu_count()},
    }
    out = ROOT / "bench" / "results" / "dataset_upload.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
