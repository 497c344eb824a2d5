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


@pytest.mark.django_db(transaction=True)
def test_each_search_migration_writes_the_search_text_of_its_own_version(world, schema):
    """Migrations 0008 to 0010 each give a memory the search text of the version they were
    written with: an install upgraded from before 0008 ends as one that took them one at a
    time, and going back leaves each step's text. Written from today's code instead, 0008
    already wrote what 0010 writes, accents dropped and Korean parts added."""
    from memory_app.models import Memory

    texts = ["Café 寿司", "ΛΟΓΟΣ 寿司", "주간회의 寿司"]
    memories = [remember(world.tenant_a, world.qor_a, world.alice, text) for text in texts]

    def search_texts():
        return list(Memory.objects.filter(pk__in=[m.pk for m in memories]).order_by("pk")
                    .values_list("search_text", flat=True))

    schema.to([("memory_app", "0007_compact_requests")])
    schema.to([("memory_app", "0008_memory_search_text")])  # Chinese spaced out, nothing else
    assert search_texts() == ["Café  寿 司 ", "ΛΟΓΟΣ  寿 司 ", "주간회의  寿 司 "]
    schema.to([("memory_app", "0009_memory_search_normalised")])  # and Greek normalised
    assert search_texts() == ["Café  寿 司 ", "λογοσ  寿 司 ", "주간회의  寿 司 "]
    schema.latest()  # and accents dropped, the inner parts of Korean words added
    assert search_texts() == ["Cafe  寿 司 ", "λογοσ  寿 司 ", "주간회의  寿 司  0간회의 0회의"]
    schema.to([("memory_app", "0009_memory_search_normalised")])
    assert search_texts() == ["Café  寿 司 ", "λογοσ  寿 司 ", "주간회의  寿 司 "]
    schema.to([("memory_app", "0008_memory_search_text")])
    assert search_texts() == ["Café  寿 司 ", "ΛΟΓΟΣ  寿 司 ", "주간회의  寿 司 "]


@pytest.mark.django_db(transaction=True)
def test_an_install_from_before_the_delete_trigger_migrates_with_its_checks(world, schema):
    """`qorven migrate` runs the database checks before it migrates. An install whose
    memories are at 0004 has the search table of 0002 and not yet the trigger 0005 adds:
    the check took that for a trigger a rebuild had lost, and the upgrade stopped there."""
    from django.core import checks
    from django.core.management import call_command

    from memory_app.models import Memory

    kept = remember(world.tenant_a, world.qor_a, world.alice, "Alice waters the orchids")
    schema.to([("memory_app", "0004_skill_router")])
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    call_command("migrate", interactive=False, verbosity=0, skip_checks=False)
    assert list(Memory.objects.values_list("content", flat=True)) == [kept.content]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
