"""A small threaded fake of the Gantry executor API, for executor tests."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/api/v1/executor/jobs/"


class FakeGantry:
    def __init__(self, *, token: str = "secret-token", job: int = 12) -> None:
        self.token = token
        self.job = job
        self.lock = threading.Lock()
        self.spec: dict[str, Any] = {
            "job": job,
            "kind": "train",
            "command": ["python", "-c", "print('hello')"],
            "env": {},
            "timeout_seconds": None,
            "grace_seconds": 1,
            "heartbeat_seconds": 0.2,
            "outputs_dir": "outputs",
            "inputs": [],
        }
        self.lines: dict[int, dict[int, dict[str, Any]]] = {}
        self.line_arrival: dict[int, list[int]] = {}  # first arrival order of seqs
        self.metrics: dict[int, dict[int, dict[str, Any]]] = {}
        self.metric_arrival: dict[int, list[int]] = {}
        self.duplicates = 0
        self.statuses: list[dict[str, Any]] = []
        self.artifacts: dict[tuple[int, str], dict[str, Any]] = {}
        self.heartbeats = 0
        self.files: dict[str, bytes] = {}  # served at /files/<name>
        self.cancel = False
        self.revoked = False  # answer 401 to everything
        self.unavailable = False  # answer 503 to everything
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeGantry:
        handler = type("Handler", (_Handler,), {"fake": self})
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (connections are refused until restart())."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def restart(self) -> None:
        deadline = time.monotonic() + 5
        while True:
            try:
                self.start()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -- helpers for tests ---------------------------------------------------------
    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return f"/files/{name}"

    def ordered_lines(self, worker: int = 0) -> list[dict[str, Any]]:
        with self.lock:
            got = self.lines.get(worker, {})
            return [got[s] for s in sorted(got)]

    def ordered_metrics(self, worker: int = 0) -> list[dict[str, Any]]:
        with self.lock:
            got = self.metrics.get(worker, {})
            return [got[s] for s in sorted(got)]

    def status_events(self, event: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.statuses if s.get("event") == event]

    def final_status(self) -> dict[str, Any] | None:
        exited = self.status_events("exited")
        return exited[-1] if exited else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGantry
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _route(self, method: str) -> None:
        fake = self.fake
        path = urllib.parse.urlsplit(self.path).path
        body = self._body()
        with fake.lock:
            fake.requests.append((method, path))
        if fake.unavailable:
            return self._send(503, {"detail": "unavailable"})
        if self.headers.get("Authorization") != f"Bearer {fake.token}" or fake.revoked:
            return self._send(401, {"detail": "bad token"})
        if method == "GET" and path.startswith("/files/"):
            data = fake.files.get(urllib.parse.unquote(path[len("/files/") :]))
            if data is None:
                return self._send(404, {"detail": "no such file"})
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)/(.+)", path)
        if not m or int(m.group(1)) != fake.job:
            return self._send(404, {"detail": "not found"})
        action = m.group(2)
        if method == "GET" and action == "spec":
            return self._send(200, fake.spec)
        if method == "PUT" and action.startswith("artifacts/"):
            rel = urllib.parse.unquote(action[len("artifacts/") :])
            worker = int(self.headers.get("X-Gantry-Worker", "0"))
            with fake.lock:
                fake.artifacts[(worker, rel)] = {
                    "data": body,
                    "sha256": self.headers.get("X-Gantry-Sha256"),
                    "actual_sha256": hashlib.sha256(body).hexdigest(),
                    "content_type": self.headers.get("Content-Type"),
                }
            return self._send(201, {"ok": True})
        if method != "POST":
            return self._send(405, {"detail": "method not allowed"})
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            return self._send(400, {"detail": "bad json"})
        worker = int(payload.get("worker", -1))
        if action == "status":
            with fake.lock:
                fake.statuses.append(payload)
            return self._send(200, {"ok": True})
        if action == "heartbeat":
            with fake.lock:
                fake.heartbeats += 1
            return self._send(200, {"cancel": fake.cancel})
        if action in ("logs", "metrics"):
            key = "lines" if action == "logs" else "metrics"
            store = fake.lines if action == "logs" else fake.metrics
            arrival = fake.line_arrival if action == "logs" else fake.metric_arrival
            with fake.lock:
                got = store.setdefault(worker, {})
                order = arrival.setdefault(worker, [])
                for item in payload.get(key, []):
                    seq = int(item["seq"])
                    if seq in got:
                        fake.duplicates += 1
                        continue
                    got[seq] = item
                    order.append(seq)
                last = max(got) if got else 0
            return self._send(200, {"last_seq": last})
        return self._send(404, {"detail": "unknown action"})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")
