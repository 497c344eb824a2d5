"""memory_search: the database's full-text search, ranked, limited, never crossing owners."""
from __future__ import annotations

import pytest
from django.db import connection

from memory_app.models import Memory
from memory_app.fulltext import FTS_TABLE
from memory_app.selectors import memory_search
from memory_app.services import (
    DuplicateMemory,
    MemoryScope,
    memory_add,
    memory_clear,
    memory_delete,
    memory_update,
)

from ..factories.memory_app import remember
from ..factories.tenancy import QorFactory

pytestmark = pytest.mark.django_db


def search(world, query, user=None, qor=None, tenant=None, limit=5):
    return memory_search(
        tenant=tenant or world.tenant_a, qor=qor or world.qor_a, user=user or world.alice, query=query, limit=limit
    )


def contents(memories):
    return [m.content for m in memories]


def test_a_stated_fact_is_found_by_any_of_its_words_stemmed(world):
    remember(world.tenant_a, world.qor_a, world.alice, "Alice's passport number ends in 4471")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice prefers window seats on long flights")
    assert contents(search(world, "What does my passport end with?")) == ["Alice's passport number ends in 4471"]
    # "meetings" and "meeting" share a stem on both databases.
    remember(world.tenant_a, world.qor_a, world.alice, "Weekly meetings with Priya happen on Tuesdays")
    assert contents(search(world, "when is my meeting with priya")) == [
        "Weekly meetings with Priya happen on Tuesdays"
    ]


def test_more_matching_words_rank_higher_and_the_limit_holds(world):
    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes green tea")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes jasmine green tea in the morning")
    remember(world.tenant_a, world.qor_a, world.alice, "Alice's cat is called Miso")
    found = search(world, "jasmine green tea", limit=2)
    assert contents(found) == ["Alice likes jasmine green tea in the morning", "Alice likes green tea"]
    assert contents(search(world, "tea", limit=1)) in (["Alice likes green tea"],
                                                        ["Alice likes jasmine green tea in the morning"])
    assert search(world, "tea", limit=0) == []


def test_a_memory_of_another_tenant_qor_or_user_never_matches_even_with_the_same_words(world):
    words = "The spare key is under the blue flowerpot"
    remember(world.tenant_b, world.qor_b, world.charlie, words)  # tenant B, same Qor slug
    other_qor = QorFactory(tenant=world.tenant_a, slug="other", is_default=False)
    remember(world.tenant_a, other_qor, world.alice, words)
    remember(world.tenant_a, world.qor_a, world.bob, words)
    remember(world.tenant_a, world.qor_a, None, words)  # a Qor-wide note, no user
    assert search(world, "where is the spare key?") == []
    mine = remember(world.tenant_a, world.qor_a, world.alice, words)
    assert search(world, "where is the spare key?") == [mine]
    # Asking tenant B with tenant A's Qor (a forged pairing) finds nothing either.
    assert search(world, "spare key", tenant=world.tenant_b) == []
    b = search(world, "spare key", tenant=world.tenant_b, qor=world.qor_b, user=world.charlie)
    assert [(m.tenant_id, m.user_id) for m in b] == [(world.tenant_b.pk, world.charlie.pk)]


@pytest.mark.parametrize("query", [
    'passport" OR owner : * NEAR(', "content:passport", "-passport ^ ( * )", "passport*", "'; DROP TABLE x; --",
    "AND OR NOT", "((", '"""', "ünïcödé pässpört", "a" * 5000,
])
def test_user_text_is_never_read_as_search_syntax(world, query):
    remember(world.tenant_a, world.qor_a, world.alice, "Alice's passport number ends in 4471")
    found = search(world, query)
    assert all(m.user_id == world.alice.pk for m in found)


def test_a_query_of_only_stop_words_or_punctuation_finds_nothing(world):
    remember(world.tenant_a, world.qor_a, world.alice, "What is it that you are doing")
    assert search(world, "what is it") == []
    assert search(world, "?!") == []


def test_duplicates_by_normalized_content_are_stored_once(world):
    first, created = memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact",
                                content="Alice lives in Lisbon")
    again, created_again = memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="fact",
                                      content="  alice   LIVES in lisbon ")
    assert created and not created_again and again.pk == first.pk
    # Another type or another user is another memory.
    assert memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.alice, type="lesson",
                      content="Alice lives in Lisbon")[1]
    assert memory_add(tenant=world.tenant_a, qor=world.qor_a, user=world.bob, type="fact",
                      content="Alice lives in Lisbon")[1]
    assert len(search(world, "Lisbon")) == 2  # alice's fact and lesson, one row each


def test_edits_and_deletions_keep_the_index_in_step(world):
    memory = remember(world.tenant_a, world.qor_a, world.alice, "Alice drives a red bicycle")
    memory_update(memory=memory, content="Alice rides a green scooter")
    assert search(world, "bicycle") == []
    assert contents(search(world, "scooter")) == ["Alice rides a green scooter"]
    other = remember(world.tenant_a, world.qor_a, world.alice, "Alice rides horses on Sundays")
    with pytest.raises(DuplicateMemory):
        memory_update(memory=other, content="alice rides a GREEN scooter")
    memory_delete(memories=[memory])
    assert contents(search(world, "rides")) == ["Alice rides horses on Sundays"]
    remember(world.tenant_b, world.qor_b, world.charlie, "Charlie rides horses too")
    assert memory_clear(scope=MemoryScope(tenant=world.tenant_a)) == 1
    assert search(world, "rides") == []
    assert contents(search(world, "rides", tenant=world.tenant_b, qor=world.qor_b, user=world.charlie)) == [
        "Charlie rides horses too"
    ]


def indexed_texts():
    """What the memory search index holds, whatever the database: SQLite's FTS5 table (it
    keeps its own copy of the text) or PostgreSQL's `search_vector`, a column of the row."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT owner || '|' || content FROM {FTS_TABLE}")
        else:
            cursor.execute("SELECT search_vector::text FROM memory_app_memory")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize("delete", ["user", "tenant", "qor", "queryset", "raw sql"])
def test_a_memory_deleted_any_way_leaves_nothing_in_the_index(world, delete):
    """A cascade (an admin deleting a person, a workspace or a Qor), a queryset or plain
    SQL: the index keeps no copy of what went."""
    remember(world.tenant_a, world.qor_a, world.bob, "GRIFFONDALE acquisition target is Vexcorp")
    remember(world.tenant_b, world.qor_b, world.charlie, "Charlie's Vexcorp badge")
    if delete == "user":
        world.bob.delete()
    elif delete == "tenant":
        world.tenant_a.delete()
    elif delete == "qor":
        world.qor_a.delete()
    elif delete == "queryset":
        Memory.objects.filter(user=world.bob).delete()
    else:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM memory_app_memory WHERE user_id = %s", [world.bob.pk])
    assert Memory.objects.filter(content__contains="GRIFFONDALE").count() == 0
    left = indexed_texts()
    assert len(left) == 1 and not any("griffondal" in text.lower() for text in left)
    assert contents(search(world, "Vexcorp badge", tenant=world.tenant_b, qor=world.qor_b, user=world.charlie)) == [
        "Charlie's Vexcorp badge"
    ]


def test_the_database_has_its_full_text_index(world):
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_search_vector_gin'")
            (definition,) = cursor.fetchone()
            assert "gin (search_vector)" in definition
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(
                "EXPLAIN SELECT id FROM memory_app_memory WHERE search_vector @@ plainto_tsquery('english', 'key')"
            )
            plan = " ".join(row[0] for row in cursor.fetchall())
            assert "memory_search_vector_gin" in plan
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_app_memory_fts'")
            assert "fts5" in cursor.fetchone()[0].lower()


def test_a_rare_word_is_found_among_many_memories_that_share_a_common_word(world, monkeypatch):
    import memory_app.selectors as selectors

    monkeypatch.setattr(selectors, "CANDIDATES_PER_TERM", 5)  # as if alice had a million memories
    passport = remember(world.tenant_a, world.qor_a, world.alice, "Alice renewed her passport in March")
    for i in range(30):
        remember(world.tenant_a, world.qor_a, world.alice, f"Alice mentioned topic number {i}")
    found = search(world, "Alice, when did I renew the passport?", limit=3)
    assert found[0] == passport and len(found) == 3


def test_no_memory_text_can_pass_for_another_owner(world):
    a = world.tenant_a
    remember(a, world.qor_a, world.bob, f"owner {a.pk} {world.qor_a.pk} {world.alice.pk} t{a.pk}q{world.qor_a.pk}"
                                        f"u{world.alice.pk}")
    assert search(world, f"owner {a.pk} {world.qor_a.pk} {world.alice.pk} t{a.pk}q{world.qor_a.pk}u{world.alice.pk}") == []


def test_a_word_the_database_treats_as_a_stop_word_matches_nothing_rather_than_everything(world, monkeypatch):
    import memory_app.selectors as selectors

    remember(world.tenant_a, world.qor_a, world.alice, "Alice likes tea")
    # As if our stop word list missed one the database has: the term reaches the query.
    monkeypatch.setattr(selectors, "memory_terms", lambda text: ["the"])
    assert search(world, "the") == []


@pytest.mark.django_db(transaction=True)
def test_the_index_entries_earlier_cascades_left_are_removed_by_the_migration(world, schema):
    if connection.vendor != "sqlite":
        return  # PostgreSQL's search vector is a column of the row: nothing is left
    kept = remember(world.tenant_a, world.qor_a, world.alice, "Alice waters the orchids")
    gone = remember(world.tenant_a, world.qor_a, world.bob, "GRIFFONDALE acquisition target is Vexcorp")
    schema.to([("memory_app", "0004_skill_router")])
    Memory.objects.filter(pk=gone.pk).delete()  # a cascade before the trigger existed
    assert len(indexed_texts()) == 2
    schema.latest()
    assert indexed_texts() == [f"t{world.tenant_a.pk}q{world.qor_a.pk}u{world.alice.pk}|{kept.content}"]


@pytest.mark.django_db(transaction=True)
def test_a_missing_delete_trigger_fails_the_system_check(world):
    from django.core import checks

    if connection.vendor != "sqlite":
        assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
        return
    from memory_app.migrations._trigger import DELETE_SQLITE

    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER memory_search_delete")
    try:
        errors = checks.run_checks(tags=[checks.Tags.database], databases=["default"])
        assert [e.id for e in errors] == ["memory_app.E001"] and "memory_search_delete" in errors[0].msg
    finally:
        with connection.cursor() as cursor:
            cursor.execute(DELETE_SQLITE)
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
