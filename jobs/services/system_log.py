"""Lines Gantry itself writes into a job's log (the idle-GPU warning, the stop after it).

A worker's log is numbered by its executor (seq 1, 2, ...; the server drops a repeated
seq as a resend). A Gantry line takes the next stored seq and raises the worker's
`log_seq_offset`, by which every later executor line is shifted when stored
(jobs.services.ingestion.ingest_logs): no two lines share a seq, the order is the order
of arrival, and a reader resuming with `?after=<seq>` (the log API, the live-log socket,
`gantry logs -f`) gets each line once. The executor's own numbering is untouched."""

from __future__ import annotations

import json
import time
from functools import partial

from django.db import transaction

from jobs.consumers import publish_lines
from jobs.models import Job, JobWorker, LogChunk

PREFIX = "[gantry] "  # the marker of the executor's own system lines too
STREAM = "system"


def append_system_log(job: Job, text: str, rank: int = 0) -> dict | None:
    """Append one marked line (`[gantry] text`) to worker `rank`'s log, store it as the
    executor's lines are stored and send it to live viewers once the transaction commits.
    Returns the line, or None when the job has no such worker (nothing is written)."""
    text = PREFIX + " ".join(str(text).replace("\x00", "").split())
    with transaction.atomic():
        worker = JobWorker.objects.select_for_update().filter(job=job, rank=rank).first()
        if worker is None:
            return None
        seq = worker.last_log_seq + worker.log_seq_offset + 1
        line = {"seq": seq, "stream": STREAM, "ts": time.time(), "text": text}
        LogChunk.objects.create(
            job=job,
            worker=rank,
            first_seq=seq,
            last_seq=seq,
            line_count=1,
            data=json.dumps(line, ensure_ascii=False) + "\n",
        )
        JobWorker.objects.filter(pk=worker.pk).update(log_seq_offset=worker.log_seq_offset + 1)
        transaction.on_commit(partial(publish_lines, job.pk, rank, [line]))
    return line
