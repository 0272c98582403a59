"""Unchanged MLflow code in a job logs into the job's run, through the executor.

The command may have no network to Gantry (a sandboxed job has loopback only), so the
executor listens on 127.0.0.1 *inside the job's network namespace* and relays the MLflow
client's requests to Gantry with the job's tracking token. MLFLOW_TRACKING_URI points
at this relay. Metrics the command logs to its own run (log-metric, log-batch) also go
to the job's metric stream, as `executor.log_metric` points do (the executor numbers
them, so they never collide with the helper's): they are the job's metrics, on the job
page's live charts.

Standard library only. The listening socket is made by a short-lived thread that first
enters the job's network namespace (setns); a socket stays in the namespace it was made
in, and the threads that serve it stay in the executor's own, where Gantry is.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import math
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CLONE_NEWNET = 0x40000000
CHUNK = 1 << 20
METRIC_PATHS = ("/api/2.0/mlflow/runs/log-metric", "/api/2.0/mlflow/runs/log-batch")
FORWARDED_HEADERS = ("content-type", "content-length", "accept", "accept-encoding", "user-agent")
RETURNED_HEADERS = ("content-type", "content-length", "content-disposition", "content-encoding")


def _listen_in(netns_fd: int | None) -> socket.socket:
    """A listening socket on 127.0.0.1 in the given network namespace (None: this one)."""
    made: dict[str, Any] = {}

    def make() -> None:
        try:
            if netns_fd is not None:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(netns_fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(
                        err, f"setns into the job's network namespace: {os.strerror(err)}"
                    )
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            made["sock"] = sock
        except OSError as exc:
            made["error"] = exc

    # The thread ends in the job's namespace and is gone; nothing else ever enters it.
    thread = threading.Thread(target=make, name="mlflow-relay-listen")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    return made["sock"]


def metric_points(path: str, body: bytes, run_id: str) -> list[dict[str, Any]]:
    """The job-metric items (name, value, step, ts) of a log-metric / log-batch body for
    the job's own run; values MLflow allows and Gantry's stream does not (NaN, ±inf)
    become null, as the helper makes them."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return []
    if not isinstance(data, dict) or (data.get("run_id") or data.get("run_uuid")) != run_id:
        return []
    items = [data] if path.endswith("log-metric") else data.get("metrics") or []
    points = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or not item["key"]:
            continue
        value = item.get("value")
        if isinstance(value, str):
            value = None  # "NaN", "Infinity"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        step = item.get("step", 0)
        step = (
            int(step) if isinstance(step, (int, str)) and str(step).lstrip("-").isdigit() else None
        )
        timestamp = item.get("timestamp")
        ts = (
            float(timestamp) / 1000
            if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool)
            else time.time()
        )
        points.append({"name": item["key"], "value": value, "step": step, "ts": ts})
    return points


class Relay:
    """Forwards the command's MLflow requests to Gantry; see the module docstring."""

    def __init__(
        self,
        target: str,
        token: str,
        run_id: str,
        on_metrics: Callable[[list[dict[str, Any]]], None],
        netns_fd: int | None = None,
        timeout: float = 300.0,
    ) -> None:
        parts = urllib.parse.urlsplit(target)
        self.scheme, self.netloc = parts.scheme, parts.netloc
        self.prefix = parts.path.rstrip("/")
        self.token, self.run_id, self.on_metrics = token, run_id, on_metrics
        self.timeout = timeout
        self.server = ThreadingHTTPServer(
            ("127.0.0.1", 0), self._handler(), bind_and_activate=False
        )
        self.server.socket.close()
        self.server.socket = _listen_in(netns_fd)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="mlflow-relay", daemon=True
        )

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.netloc, timeout=self.timeout)

    def _handler(self):
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def _relay(self) -> None:
                length = self.headers.get("Content-Length")
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked" or (
                    length is not None and not length.isdigit()
                ):
                    self._answer(
                        411, b'{"error_code": "BAD_REQUEST", "message": "Send a Content-Length."}'
                    )
                    return
                size = int(length or 0)
                path = self.path.split("?", 1)[0]
                watched = self.command == "POST" and path in METRIC_PATHS
                body = self.rfile.read(size) if watched else None
                conn = relay._connection()
                try:
                    conn.putrequest(
                        self.command, relay.prefix + self.path, skip_accept_encoding=True
                    )
                    for name, value in self.headers.items():
                        if name.lower() in FORWARDED_HEADERS:
                            conn.putheader(name, value)
                    if "content-length" not in (k.lower() for k in self.headers):
                        conn.putheader("Content-Length", "0")
                    conn.putheader("Authorization", f"Bearer {relay.token}")
                    conn.endheaders()
                    if body is not None:
                        conn.send(body)
                    else:
                        left = size
                        while left:
                            chunk = self.rfile.read(min(CHUNK, left))
                            if not chunk:
                                break
                            conn.send(chunk)
                            left -= len(chunk)
                    response = conn.getresponse()
                    self.send_response(response.status)
                    for name, value in response.getheaders():
                        if name.lower() in RETURNED_HEADERS:
                            self.send_header(name, value)
                    self.end_headers()
                    while True:
                        chunk = response.read(CHUNK)
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                    if watched and response.status == 200:
                        points = metric_points(path, body, relay.run_id)
                        if points:
                            relay.on_metrics(points)
                except (OSError, http.client.HTTPException) as exc:
                    message = json.dumps(
                        {
                            "error_code": "TEMPORARILY_UNAVAILABLE",
                            "message": f"Gantry unreachable: {exc}",
                        }
                    ).encode()
                    with contextlib.suppress(OSError):
                        self._answer(503, message)
                finally:
                    conn.close()

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _relay

        return Handler
