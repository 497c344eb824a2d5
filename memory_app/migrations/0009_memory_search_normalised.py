"""Memory search reads Greek with or without its accents, in capitals or not, with its final
sigma or the ordinary one, and full-width letters and digits as the ASCII ones: a memory's
`search_text` writes those letters as sessions_app.fulltext.NORMALISED does.

Memories stored before and holding such letters are given theirs here, in batches of
BATCH rows (only those holding such letters are read), and on SQLite their FTS5 entries
are written again from it; PostgreSQL's generated `search_vector` follows the column.
Each batch is its own transaction, so a live install keeps answering while this runs.
"""
import importlib

from django.db import migrations, transaction

BATCH = 1000
SEARCH_TABLE = "memory_app_memory_fts"
# The Greek blocks and the full-width letters and digits: every letter NORMALISED writes
# anew is in them (a Greek memory holding none is read too, and left as it was). Written
# as escapes that Python and PostgreSQL read alike.
NORMALISED_BLOCKS = r"[\u0370-\u03ff\u1f00-\u1fff\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]"


# History search's migrations, whose copies of the search text are kept as they were written.
_0015 = importlib.import_module("sessions_app.migrations.0015_message_search_normalised")
_0017 = importlib.import_module("sessions_app.migrations.0017_message_search_accents_korean")


def search_text(content: str) -> str | None:
    """A memory's search text as this migration wrote it: Greek and full-width letters
    normalised, unspaced letters spaced out; None when that is the content itself."""
    text = _0017.search_text_before(content)
    return None if text == content else text


def _spaced_as_before(content: str) -> str | None:
    """Migration 0008's search text of `content`: its unspaced letters spaced out, nothing else."""
    spaced = _0015.spaced(content)
    return None if spaced == content else spaced


def _write(apps, schema_editor, text_of) -> None:
    """Every memory holding such letters gets `text_of(content)` as its search text, in
    batches; on SQLite its FTS5 entry too."""
    Memory = apps.get_model("memory_app", "Memory")
    db = schema_editor.connection.alias
    last = 0
    while True:
        # Ordered by id from the last one seen: each batch starts where the last ended.
        batch = list(Memory.objects.using(db).filter(pk__gt=last, content__regex=NORMALISED_BLOCKS)
                     .order_by("pk").only("pk", "content")[:BATCH])
        if not batch:
            break
        last = batch[-1].pk
        for memory in batch:
            memory.search_text = text_of(memory.content)
        with transaction.atomic(using=db):
            Memory.objects.using(db).bulk_update(batch, ["search_text"])
            if schema_editor.connection.vendor == "sqlite":
                with schema_editor.connection.cursor() as cursor:
                    cursor.executemany(f"UPDATE {SEARCH_TABLE} SET content = %s WHERE rowid = %s",
                                       [(m.search_text or m.content, m.pk) for m in batch])


def forward(apps, schema_editor) -> None:
    _write(apps, schema_editor, search_text)


def backward(apps, schema_editor) -> None:
    _write(apps, schema_editor, _spaced_as_before)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("memory_app", "0008_memory_search_text"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
