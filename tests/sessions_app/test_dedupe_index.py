"""The external-id dedupe that runs on every inbound message searches the partial unique
index on both databases; a full scan grew with the table (120 ms at 1.1M rows)."""
from __future__ import annotations

import pytest
from django.db import connection, transaction

from sessions_app.services import external_message_query

pytestmark = pytest.mark.django_db


def plan() -> str:
    sql, params = external_message_query(1, "telegram:1", "4242").query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        else:
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny test table: ask whether the index can serve
            cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(str(row) for row in cursor.fetchall())


def test_the_dedupe_lookup_searches_the_partial_unique_index():
    found = plan()
    assert "message_unique_external_id" in found, found
    assert "SCAN sessions_app_message" not in found and "Seq Scan" not in found and "Sort" not in found, found
