"""The external-id dedupe that runs on every inbound message searches the partial unique
index on both databases; a full scan grew with the table (120 ms at 1.1M rows)."""
from __future__ import annotations

import pytest

from sessions_app.services.append import external_message_query

from ..query_plans import query_plan

pytestmark = pytest.mark.django_db


def plan() -> str:
    return query_plan(*external_message_query(1, "telegram:1", "4242").query.sql_with_params())


def test_the_dedupe_lookup_searches_the_partial_unique_index():
    found = plan()
    assert "message_unique_external_id" in found, found
    assert "SCAN sessions_app_message" not in found and "Seq Scan" not in found and "Sort" not in found, found
