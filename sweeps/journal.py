"""Optuna's study state in Gantry's database: a JournalStorage backend on a Django model.

Why a journal on our own table rather than Optuna's RDBStorage on the same database:
RDBStorage brings SQLAlchemy and Alembic with their own connections, pools and schema
migrations beside Django's, which `manage.py migrate`, the test database and the
fresh-clone check would not know about (its tables would live outside Django's migrations
and outside the test transaction). The journal is two calls — append entries, read them
from a number on — so one Django table carries it on SQLite and PostgreSQL alike, inside
Django's transactions and migrations, and a sweep's study is deleted with the sweep.
Every worker process rebuilds the study by replaying the entries, so a restarted web
server or worker goes on from exactly what was stored.

One log per sweep (entries numbered from 0): a study never reads another's entries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend

from sweeps.models import StudyLog, Sweep


class DjangoJournalBackend(BaseJournalBackend):
    """Optuna's journal for one sweep, in StudyLog rows.

    Appends are atomic and numbered under a lock on the sweep's row (PostgreSQL's SELECT
    … FOR UPDATE; SQLite serialises writers), and the unique (sweep, number) constraint
    refuses a second writer that raced past it: that append is retried with fresh numbers.
    """

    def __init__(self, sweep_id: int) -> None:
        self.sweep_id = sweep_id

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        rows = StudyLog.objects.filter(sweep_id=self.sweep_id, number__gte=log_number_from)
        return list(rows.order_by("number").values_list("entry", flat=True))

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        for attempt in range(5):
            try:
                with transaction.atomic():
                    list(Sweep.objects.select_for_update().filter(pk=self.sweep_id).values_list("pk"))
                    last = StudyLog.objects.filter(sweep_id=self.sweep_id).aggregate(n=Max("number"))["n"]
                    start = -1 if last is None else last
                    StudyLog.objects.bulk_create(
                        StudyLog(sweep_id=self.sweep_id, number=start + 1 + i, entry=entry)
                        for i, entry in enumerate(logs)
                    )
                return
            except IntegrityError:
                if attempt == 4:
                    raise


def storage_for(sweep_id: int) -> JournalStorage:
    return JournalStorage(DjangoJournalBackend(sweep_id))
