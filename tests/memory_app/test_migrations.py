"""Migrations a live install runs while it serves: the memories stay readable and
writable while migration 0008 gives the old ones their search text."""
from __future__ import annotations

import importlib

import pytest
from django.db import connection

from ..factories.memory_app import remember

pytestmark = pytest.mark.django_db(transaction=True)


def _other_connection():
    import psycopg

    s = connection.settings_dict
    return psycopg.connect(host=s["HOST"] or None, port=s["PORT"] or None, user=s["USER"] or None,
                           password=s["PASSWORD"] or None, dbname=s["NAME"], autocommit=True)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's table locks")
def test_memories_can_be_read_and_written_while_0008_fills_in_the_search_text(world, schema, monkeypatch):
    """A turn reads the memories (retrieval) and may write one while the host migrates:
    neither waits for the whole backfill, which took the table's exclusive lock with its
    new column and held it to the end (10 s at 200,000 memories)."""
    remember(world.tenant_a, world.qor_a, world.alice, "我喜欢寿司")
    remember(world.tenant_a, world.qor_a, world.alice, "東京タワーに行った")
    schema.to([("memory_app", "0007_compact_requests")])
    migration = importlib.import_module("memory_app.migrations.0008_memory_search_text")
    seen: list[object] = []
    spaced = migration.search_text

    def search_text_while_another_turn_runs(content):
        if not seen:
            with _other_connection() as other:
                other.execute("SET lock_timeout = '2s'")
                try:
                    seen.append(other.execute("SELECT count(*) FROM memory_app_memory").fetchone()[0])
                    with other.transaction():
                        other.execute(
                            "INSERT INTO memory_app_memory (created_at, updated_at, type, content, content_hash,"
                            " channels, tenant_id, qor_id, user_id) VALUES (now(), now(), 'fact', 'tea', 'x', '[]',"
                            " %s, %s, %s)", [world.tenant_a.pk, world.qor_a.pk, world.alice.pk])
                    seen.append("written")
                except Exception as error:  # the lock's timeout: a turn would have waited
                    seen.append(type(error).__name__)
        return spaced(content)

    monkeypatch.setattr(migration, "search_text", search_text_while_another_turn_runs)
    schema.latest()
    assert seen == [2, "written"]
