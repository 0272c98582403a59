"""What a refused request must leave alone: row counts of every table, the files in
storage, and the fields of the object the request named."""

from __future__ import annotations

import os
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.db import connection

# Tables that change under any request, hostile or not.
VOLATILE_TABLES = {"django_session"}


def _tables() -> list[str]:
    tables = set()
    for model in apps.get_models(include_auto_created=True):
        meta = model._meta
        if meta.managed and not meta.proxy and not meta.swapped:
            tables.add(meta.db_table)
    return sorted(tables - VOLATILE_TABLES)


def row_counts() -> dict[str, int]:
    """Every table's row count, in one query."""
    tables = _tables()
    quote = connection.ops.quote_name
    sql = "SELECT " + ", ".join(f"(SELECT COUNT(*) FROM {quote(t)})" for t in tables)
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return dict(zip(tables, cursor.fetchone(), strict=True))


def storage_roots() -> list[Path]:
    roots = [Path(settings.MEDIA_ROOT), Path(settings.GANTRY_JOBS_DIR)]
    location = settings.STORAGES["default"].get("OPTIONS", {}).get("location")
    if location:
        roots.append(Path(location))
    return sorted(set(roots))


def files() -> dict[str, int]:
    found = {}
    for root in storage_roots():
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    found[path] = os.path.getsize(path)
                except OSError:
                    continue
    return found


def fields_of(obj) -> dict:
    """The stored fields of `obj`, less those every save bumps (auto_now)."""
    if obj is None:
        return {}
    model = type(obj)
    names = [f.attname for f in model._meta.concrete_fields if not getattr(f, "auto_now", False)]
    return model.objects.filter(pk=obj.pk).values(*names).first() or {}


def snapshot(obj=None) -> dict:
    return {"rows": row_counts(), "files": files(), "object": fields_of(obj)}


def differences(before: dict, after: dict) -> list[str]:
    changes = []
    for table, n in after["rows"].items():
        if before["rows"].get(table) != n:
            changes.append(f"{table}: {before['rows'].get(table)} -> {n} rows")
    added = sorted(set(after["files"]) - set(before["files"]))
    removed = sorted(set(before["files"]) - set(after["files"]))
    changes += [f"new file {p}" for p in added] + [f"file gone {p}" for p in removed]
    for name, value in after["object"].items():
        if before["object"].get(name) != value:
            changes.append(f"{name}: {before['object'].get(name)!r:.80} -> {value!r:.80}")
    return changes
