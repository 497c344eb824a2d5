"""Chinese, Japanese and Thai memories can be searched: their letters are indexed one by
one (memory_app.fulltext.search_text, as it was then: `search_text` below).

A memory gets `search_text`, what the index reads instead of its content when the two
differ (NULL otherwise). Memories stored before are given theirs here, in batches of
BATCH rows (only those holding such letters are read), and on SQLite their FTS5 entries
are written again from it. PostgreSQL's generated `search_vector` then reads
`COALESCE(search_text, content)`: a generated column's expression cannot be altered, so
it is made again, as migration 0003 made it (the table is rewritten once).

Adding a nullable column keeps the SQLite table (no rebuild), so the delete trigger of
migration 0005 stays.

Not one transaction: a live install keeps answering while this runs. The new column is
committed at once (its lock is momentary), each batch is its own transaction, and only
PostgreSQL's rewrite of the vector and its index hold the table (about 3 s per 100,000
memories; the README's upgrade notes). In one transaction the new column's exclusive
lock was held through the whole backfill too: every turn's memory retrieval waited for it
(10 s at 200,000 memories, 20,000 of them Chinese).
"""
import importlib

from django.db import migrations, models, transaction

BATCH = 1000
SEARCH_TABLE = "memory_app_memory_fts"
OWNER = "'owner ' || tenant_id::text || ' ' || qor_id::text || ' ' || COALESCE(user_id::text, 'x')"

# History search's migration of the same change, whose copies of the letters and their
# spacing are kept as they were written.
_history = importlib.import_module("sessions_app.migrations.0015_message_search_normalised")
UNSPACED_LETTER = _history.UNSPACED_LETTER


def search_text(content: str) -> str | None:
    """A memory's search text as this migration wrote it: its unspaced letters spaced out,
    nothing else; None when that is the content itself."""
    spaced = _history.spaced(content)
    return None if spaced == content else spaced


def _vector(text: str) -> list[str]:
    return [
        "DROP INDEX IF EXISTS memory_search_vector_gin",
        "ALTER TABLE memory_app_memory DROP COLUMN IF EXISTS search_vector",
        "ALTER TABLE memory_app_memory ADD COLUMN search_vector tsvector GENERATED ALWAYS AS"
        f" (to_tsvector('english'::regconfig, {text}) || array_to_tsvector(ARRAY[{OWNER}])) STORED",
        "CREATE INDEX memory_search_vector_gin ON memory_app_memory USING gin (search_vector)",
    ]


def _index_again(schema_editor, rows: list[tuple[int, str]]) -> None:
    """SQLite: the FTS5 entries of these (id, text) memories hold `text` now."""
    if schema_editor.connection.vendor == "sqlite" and rows:
        with schema_editor.connection.cursor() as cursor:
            cursor.executemany(f"UPDATE {SEARCH_TABLE} SET content = %s WHERE rowid = %s",
                               [(text, pk) for pk, text in rows])


def forward(apps, schema_editor) -> None:
    Memory = apps.get_model("memory_app", "Memory")
    db = schema_editor.connection.alias
    last = 0
    while True:
        # Ordered by id from the last one seen: each batch starts where the last ended.
        batch = list(Memory.objects.using(db).filter(pk__gt=last, content__regex=UNSPACED_LETTER)
                     .order_by("pk").only("pk", "content")[:BATCH])
        if not batch:
            break
        last = batch[-1].pk
        for memory in batch:
            memory.search_text = search_text(memory.content)
        changed = [m for m in batch if m.search_text is not None]
        with transaction.atomic(using=db):
            Memory.objects.using(db).bulk_update(changed, ["search_text"])
            _index_again(schema_editor, [(m.pk, m.search_text) for m in changed])
    if schema_editor.connection.vendor == "postgresql":
        with transaction.atomic(using=db):  # never a table without its vector
            for sql in _vector("COALESCE(search_text, content)"):
                schema_editor.execute(sql)


def backward(apps, schema_editor) -> None:
    Memory = apps.get_model("memory_app", "Memory")
    db = schema_editor.connection.alias
    if schema_editor.connection.vendor == "postgresql":
        with transaction.atomic(using=db):
            for sql in _vector("content"):
                schema_editor.execute(sql)
        return
    last = 0
    while True:
        batch = list(Memory.objects.using(db).filter(pk__gt=last, search_text__isnull=False)
                     .order_by("pk").values_list("pk", "content")[:BATCH])
        if not batch:
            break
        last = batch[-1][0]
        with transaction.atomic(using=db):
            _index_again(schema_editor, batch)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("memory_app", "0007_compact_requests"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="search_text",
            field=models.TextField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(forward, backward),
    ]
