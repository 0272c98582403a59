"""Batched, spooled, at-least-once delivery of log lines and metrics.

Every batch is appended to a JSON-lines spool file (fsync'd) *before* it is
sent, so items survive an outage and a restart of the executor. Items carry a
per-worker ``seq`` assigned when they are added; they are always sent in seq
order. A small state file remembers the highest seq ever spooled so numbering
continues after the spool is compacted.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from .client import Client, FatalError, GiveUp, HttpError, log_stderr

BATCH_MAX = 500
LINGER_SECONDS = 0.2
COMPACT_BYTES = 1 << 20
COMPACT_SECONDS = 5.0


class Shipper:
    """One stream of seq-numbered items (``logs`` or ``metrics``) for one worker."""

    def __init__(
        self,
        client: Client,
        *,
        endpoint: str,
        key: str,
        worker: int,
        spool_dir: str,
        batch_max: int = BATCH_MAX,
        linger: float = LINGER_SECONDS,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.key = key
        self.worker = worker
        self.batch_max = batch_max
        self.linger = linger
        os.makedirs(spool_dir, exist_ok=True)
        self.spool_path = os.path.join(spool_dir, f"{endpoint}-w{worker}.jsonl")
        self.state_path = os.path.join(spool_dir, f"{endpoint}-w{worker}.state")

        self._cond = threading.Condition()  # guards _pending, _next_seq, _closing
        self._pending: list[dict[str, Any]] = []
        self._first_at: float | None = None
        self._closing = False
        self._next_seq = 1

        self._scond = threading.Condition()  # guards spool file, _unacked
        self._unacked: list[dict[str, Any]] = []
        self._spooled_max = 0
        self._writer_done = False
        self._last_compact = time.monotonic()
        self._spool_fh: Any = None

        self.error: BaseException | None = None  # why the sender stopped early
        self.dropped = 0
        self.resent = 0
        self._writer = threading.Thread(
            target=self._writer_loop, name=f"{endpoint}-spool", daemon=True
        )
        self._sender = threading.Thread(
            target=self._sender_loop, name=f"{endpoint}-send", daemon=True
        )

    # -- startup -------------------------------------------------------------
    def load(self) -> int:
        """Load a spool left by a previous executor; returns items to resend."""
        last = 0
        try:
            with open(self.state_path, encoding="utf-8") as fh:
                last = int(json.load(fh).get("last_seq", 0))
        except (OSError, ValueError, AttributeError, TypeError):
            last = 0
        items: list[dict[str, Any]] = []
        try:
            with open(self.spool_path, "rb") as fh:
                for raw in fh:
                    try:
                        item = json.loads(raw)
                        seq = int(item["seq"])
                    except (ValueError, KeyError, TypeError):
                        continue  # torn last line after a crash
                    if items and seq <= items[-1]["seq"]:
                        continue
                    items.append(item)
        except FileNotFoundError:
            pass
        self._unacked = items
        self._spooled_max = max([last] + [i["seq"] for i in items])
        self._next_seq = self._spooled_max + 1
        self.resent = len(items)
        return len(items)

    def probe_server(self, deadline: float | None) -> None:
        """Ask the server for its last seq (empty batch) so a fresh workdir
        does not reuse seq numbers the server already has (they would be
        dropped as duplicates)."""
        try:
            resp = self.client.json(
                "POST", self.endpoint, {"worker": self.worker, self.key: []}, deadline=deadline
            )
        except (HttpError, GiveUp):
            return
        try:
            server_last = int(resp.get("last_seq") or 0)
        except (AttributeError, TypeError, ValueError):
            return
        with self._cond:
            if server_last >= self._next_seq:
                self._next_seq = server_last + 1

    def start(self) -> None:
        self._spool_fh = open(self.spool_path, "ab")  # noqa: SIM115 - long lived
        self._writer.start()
        self._sender.start()

    # -- producer side -----------------------------------------------------------
    def add(self, item: dict[str, Any]) -> int:
        with self._cond:
            seq = self._next_seq
            self._next_seq += 1
            item["seq"] = seq
            self._pending.append(item)
            if self._first_at is None:
                self._first_at = time.monotonic()
                self._cond.notify_all()
            elif len(self._pending) >= self.batch_max:
                self._cond.notify_all()
        return seq

    # -- shutdown ----------------------------------------------------------------
    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything is delivered (or the sender gave up)."""
        end = None if timeout is None else time.monotonic() + timeout
        for t in (self._writer, self._sender):
            if not t.is_alive():
                continue
            t.join(None if end is None else max(0.0, end - time.monotonic()))
        return not self._sender.is_alive()

    @property
    def undelivered(self) -> int:
        with self._scond:
            return len(self._unacked)

    # -- threads -----------------------------------------------------------------
    def _writer_loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._closing and self._first_at is not None:
                    flush_at = self._first_at + self.linger
                    while not self._closing and len(self._pending) < self.batch_max:
                        left = flush_at - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                batch, self._pending = self._pending, []
                self._first_at = None
                closing = self._closing
            if batch:
                self._append(batch)
            if closing:
                with self._cond:
                    if self._pending:
                        continue
                break
        with self._scond:
            self._writer_done = True
            self._scond.notify_all()

    def _append(self, batch: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(i, allow_nan=False).encode("utf-8") + b"\n" for i in batch)
        with self._scond:
            try:
                self._spool_fh.write(data)
                self._spool_fh.flush()
                os.fsync(self._spool_fh.fileno())
            except OSError as exc:  # disk full etc.: keep going in memory
                log_stderr(f"cannot write spool {self.spool_path}: {exc}")
            self._unacked.extend(batch)
            self._spooled_max = max(self._spooled_max, batch[-1]["seq"])
            self._scond.notify_all()

    def _sender_loop(self) -> None:
        while True:
            with self._scond:
                while not self._unacked and not self._writer_done:
                    self._scond.wait()
                if not self._unacked:
                    self._compact_locked(force=True)
                    return
                chunk = self._unacked[: self.batch_max]
            body = {"worker": self.worker, self.key: chunk}
            try:
                self.client.json("POST", self.endpoint, body)
            except FatalError as exc:
                self.error = exc
                return
            except GiveUp as exc:
                self.error = exc
                return
            except HttpError as exc:
                # The server rejected the batch itself (4xx): resending it can
                # never succeed, so drop it rather than block the stream.
                self.dropped += len(chunk)
                log_stderr(
                    f"server rejected {len(chunk)} {self.endpoint} item(s) "
                    f"(seq {chunk[0]['seq']}..{chunk[-1]['seq']}): {exc}"
                )
            except Exception as exc:
                self.error = exc
                log_stderr(f"{self.endpoint} sender crashed: {exc!r}")
                return
            with self._scond:
                del self._unacked[: len(chunk)]
                if not self._unacked:
                    self._compact_locked(force=False)

    def _compact_locked(self, *, force: bool) -> None:
        """All spooled items are acknowledged: empty the spool file."""
        fh = self._spool_fh
        if fh is None or self._unacked:
            return
        try:
            size = fh.tell()
        except OSError:
            size = 0
        now = time.monotonic()
        if size == 0 or (
            not force and size < COMPACT_BYTES and now - self._last_compact < COMPACT_SECONDS
        ):
            return
        try:
            tmp = self.state_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as sfh:
                json.dump({"last_seq": self._spooled_max}, sfh)
                sfh.flush()
                os.fsync(sfh.fileno())
            os.replace(tmp, self.state_path)
            fh.truncate(0)
            fh.seek(0)
            fh.flush()
            os.fsync(fh.fileno())
        except OSError as exc:
            log_stderr(f"cannot compact spool {self.spool_path}: {exc}")
        self._last_compact = now
