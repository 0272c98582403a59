"""gantry-upload: upload files or folders as a new dataset version, from a terminal.

Standard library only (it runs on machines without Gantry installed):

    GANTRY_TOKEN=gty_… python datasets/cli.py --url http://127.0.0.1:8000 --dataset 3 data/

It speaks the protocol in datasets/api.py: each file's sha256 is sent first, so files
the tenant already holds are linked instead of uploaded; parts go to the object store
through presigned URLs (S3) or to Gantry (filesystem); rerunning the same command
with `--resume ID` sends only the parts the server does not have.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import unicodedata
import urllib.error
import urllib.request
from pathlib import Path

CHUNK = 1024 * 1024


class Api:
    def __init__(self, base: str, token: str):
        self.base = base.rstrip("/") + "/api/v1/"
        self.token = token

    def call(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise SystemExit(
                f"{method} {path}: HTTP {exc.code}: {exc.read()[:500].decode()}"
            ) from None

    def put(self, url: str, data: bytes, headers: dict) -> dict:
        full = url if url.startswith("http") else self.base + url
        req = urllib.request.Request(full, data=data, method="PUT")
        for k, v in headers.items():
            req.add_header(k, v)
        if full.startswith(self.base):
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=300) as resp:
            resp.read()
            return dict(resp.headers)


class Progress:
    """One line, redrawn: bytes sent, percentage, throughput."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.start, self.stream = total, 0, time.monotonic(), stream

    def add(self, n: int) -> None:
        self.done += n
        width = 30
        frac = self.done / self.total if self.total else 1
        rate = self.done / max(time.monotonic() - self.start, 1e-6) / 1e6
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        self.stream.write(
            f"\r[{bar}] {frac * 100:5.1f}% {self.done / 1e6:8.1f} MB {rate:6.1f} MB/s"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")


def collect(paths: list[str]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file():
                    found[f.relative_to(p).as_posix()] = f
        elif p.is_file():
            found[p.name] = p
        else:
            raise SystemExit(f"{arg}: no such file or folder")
    return found


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def upload(api: Api, dataset: int, files: dict[str, Path], resume: int | None = None,
           message: str = "", hash_files: bool = True, quiet: bool = False) -> dict:  # fmt: skip
    # The server keeps names in NFKC (a macOS name in NFD comes back composed).
    files = {unicodedata.normalize("NFKC", rel): p for rel, p in files.items()}
    if resume:
        session = api.call("GET", f"uploads/{resume}/")
    else:
        listed = [
            {
                "path": rel,
                "size": p.stat().st_size,
                **({"sha256": file_sha256(p)} if hash_files else {}),
            }
            for rel, p in files.items()
        ]
        session = api.call(
            "POST", "uploads/", {"dataset": dataset, "files": listed, "message": message}
        )
    size = session["part_size"]
    todo = []
    for f in session["files"]:
        have = set(f["parts"])
        todo += [(f, n) for n in range(1, f["part_count"] + 1) if n not in have]
    total = sum(min(size, f["size"] - (n - 1) * size) for f, n in todo)
    bar = Progress(total, stream=open(os.devnull, "w") if quiet else sys.stderr)  # noqa: SIM115
    for f, n in todo:
        with open(files[f["path"]], "rb") as fh:
            fh.seek((n - 1) * size)
            chunk = fh.read(size)
        digest = hashlib.sha256(chunk).hexdigest()
        if session["backend"] == "s3":
            url = api.call(
                "POST", f"uploads/{session['id']}/sign/", {"file": f["id"], "numbers": [n]}
            )["urls"][str(n)]
            headers = api.put(url, chunk, {})
            api.call(
                "POST",
                f"uploads/{session['id']}/complete-part/",
                {"file": f["id"], "number": n, "sha256": digest, "etag": headers.get("ETag", "")},
            )
        else:
            api.put(
                f"uploads/{session['id']}/part/?file={f['id']}&number={n}",
                chunk,
                {"Content-Type": "application/octet-stream", "X-Part-Sha256": digest},
            )
        bar.add(len(chunk))
    bar.close()
    api.call("POST", f"uploads/{session['id']}/commit/")
    while True:
        status = api.call("GET", f"uploads/{session['id']}/")
        if status["state"] == "committed":
            return status
        if status["state"] != "committing":
            raise SystemExit(f"commit failed: {status['error'] or status['state']}")
        time.sleep(0.5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gantry-upload", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths", nargs="+", help="files or folders (folder contents keep their layout)"
    )
    parser.add_argument("--url", default=os.environ.get("GANTRY_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--dataset", type=int, required=True, help="dataset id")
    parser.add_argument("--message", default="")
    parser.add_argument("--resume", type=int, help="an upload id to continue")
    args = parser.parse_args(argv)
    token = os.environ.get("GANTRY_TOKEN")
    if not token:
        parser.error("set GANTRY_TOKEN to an API token (Settings → API tokens)")
    status = upload(
        Api(args.url, token), args.dataset, collect(args.paths), args.resume, args.message
    )
    print(f"committed upload #{status['id']} as version id {status['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
