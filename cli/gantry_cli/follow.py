"""Following a job's log over the live websocket (jobs/consumers.py's protocol).

The socket sends every stored line after `after` (per worker rank), then live lines, and
status changes. This client remembers the last sequence number it yielded per worker and
reconnects with `after=<rank>:<seq>,...` when the connection drops (a server restart, a
proxy timeout), so every line is yielded once and in order per worker. Once the job has
ended, one pass over the HTTP log API picks up whatever the socket had not brought yet.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect

from gantry_cli.sdk import Client, GantryError, Unreachable

NO_METRICS = 2**62  # the log is what we want: skip the metric backfill
CLOSE_ERRORS = {
    4401: ("the server no longer accepts this token", 401),
    4403: ("no longer allowed to watch this job", 403),
    4404: ("no such job (or not yours)", 404),
    4400: ("the server refused the request", 400),
}


def websocket_url(base: str, job_id: int, cursors: dict[int, int]) -> str:
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    query = {"worker": "all", "metrics_after": NO_METRICS}
    query["after"] = ",".join(f"{w}:{s}" for w, s in sorted(cursors.items())) if cursors else 0
    path = parts.path.rstrip("/") + f"/ws/jobs/{int(job_id)}/"
    return urlunsplit((scheme, parts.netloc, path, urlencode(query), ""))


def origin_of(base: str) -> str:
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}"


def job_end(job: dict) -> dict:
    """The job's final state and exit code (the first failing worker's, else 0)."""
    codes = [w.get("exit_code") for w in job.get("workers", []) if w.get("exit_code") is not None]
    failing = [c for c in codes if c != 0]
    exit_code = failing[0] if failing else (codes[0] if codes else None)
    return {"type": "end", "state": job["state"], "reason": job.get("state_reason", ""),
            "exit_code": exit_code}  # fmt: skip


def remaining_lines(client: Client, job_id: int, cursors: dict[int, int], ranks):
    """Stored lines after the cursors, through the HTTP log API (a page at a time)."""
    for rank in ranks:
        after = cursors.get(rank, 0)
        while True:
            page = client.json(
                "GET",
                f"jobs/{int(job_id)}/logs/",
                params={"worker": rank, "after": after, "limit": 5000},
            )
            yield from page["results"]
            if not page["results"] or page.get("complete"):
                break
            after = page["next_after"]


def follow_job(
    client: Client,
    job_id: int,
    after: dict[int, int] | None = None,
    reconnect_for: float = 300.0,
    on_status: Callable[[dict], None] | None = None,
) -> Iterator[dict]:
    """Yields each log line once ({"worker", "seq", "stream", "ts", "text"}), then
    {"type": "end", "state", "reason", "exit_code"} once the job has ended.

    Gives up (Unreachable) when the server stays unreachable for `reconnect_for` seconds.
    """
    cursors: dict[int, int] = dict(after or {})
    down_since: float | None = None
    delay = 0.2
    while True:
        url = websocket_url(client.url, job_id, cursors)
        try:
            with connect(
                url,
                additional_headers={"Authorization": f"Bearer {client.token}"},
                origin=origin_of(client.url),
                open_timeout=10,
                max_size=None,
            ) as socket:
                down_since, delay = None, 0.2
                ended = yield from _read(client, job_id, socket, cursors, on_status)
            if ended:
                break
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            if code in CLOSE_ERRORS:
                message, status = CLOSE_ERRORS[code]
                raise GantryError(f"job {job_id}: {message}", status) from None
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403, 404):
                raise GantryError(f"job {job_id}: the server refused the socket", status) from None
        except (OSError, InvalidHandshake, TimeoutError):
            pass
        # Dropped or refused: try again, from the cursors, until the server is back.
        now = time.monotonic()
        down_since = down_since or now
        if now - down_since > reconnect_for:
            raise Unreachable(f"lost {client.url} for {reconnect_for:.0f} s; giving up")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
    yield from _finish(client, job_id, cursors, reconnect_for)


def _read(client: Client, job_id: int, socket, cursors: dict[int, int], on_status):
    """One connection's messages; returns True once the job has ended and the backlog
    is in (the socket sends the current status before the stored lines)."""
    ended = caught_up = False
    for raw in socket:
        message = json.loads(raw)
        kind = message.get("type")
        if kind == "lines":
            for line in message["lines"]:
                worker, seq = line["worker"], line["seq"]
                if seq <= cursors.get(worker, 0):
                    continue  # already yielded before a reconnect
                cursors[worker] = seq
                yield line
        elif kind == "status":
            if on_status is not None:
                on_status(message)
            ended = ended or bool(message.get("terminal"))
        elif kind == "caught_up":
            caught_up = True
        elif kind == "truncated":
            # More lines than the socket sends at once: the older ones from the HTTP API.
            worker, before = message["worker"], message["before"]
            for line in remaining_lines(client, job_id, {worker: cursors.get(worker, 0)}, [worker]):
                if line["seq"] >= before:
                    break
                cursors[worker] = line["seq"]
                yield line
        if ended and caught_up:
            return True
    return False


def _finish(client: Client, job_id: int, cursors: dict[int, int], reconnect_for: float):
    """After the end: the lines the socket did not bring, then the job's outcome."""
    deadline = time.monotonic() + reconnect_for
    while True:
        try:
            job = client.json("GET", f"jobs/{int(job_id)}/")
            ranks = sorted({w["rank"] for w in job.get("workers", [])} | set(cursors)) or [0]
            for line in remaining_lines(client, job_id, cursors, ranks):
                if line["seq"] > cursors.get(line["worker"], 0):
                    cursors[line["worker"]] = line["seq"]
                    yield line
            yield job_end(job)
            return
        except Unreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
