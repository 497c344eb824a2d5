"""How the database would run a query: what tests read to prove a query searches an index
rather than scanning its table."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction


def query_plan(sql: str, params: Sequence[Any] = ()) -> str:
    """The plan of `sql` (SQLite's EXPLAIN QUERY PLAN, PostgreSQL's EXPLAIN), its rows as
    one text. On PostgreSQL sequential scans are off for it: a test's tiny table would be
    scanned anyway, so this asks whether the index can serve."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(str(row) for row in cursor.fetchall())
