"""Memory search reads Arabic and Hebrew words with or without their vowel points and the
other signs written over and under their letters ("مرحبا" finds "مَرْحَبًا", "שלום" finds
"שָׁלוֹם"), an Arabic word drawn out with tatweel as the word, and the spellings of an
Arabic letter a reader takes for one as that letter ("إلى" is "الى", "مدرسة" is "مدرسه",
Persian "کتاب" is "كتاب"), and an Arabic word with the article or a one-letter
conjunction or preposition written onto it also without it ("المدرسة" is also "مدرسة"):
a memory's `search_text` reads them so, as history search's index does (sessions_app 0020).

Memories stored before and holding such signs or letters, or an Arabic word that may
have such a prefix, are given theirs here, from the search text of history search's
migration of the same change (sessions_app 0020, whose copy is kept as it was written),
in batches of BATCH rows (only those its CHANGED finds are read); on SQLite their FTS5 entries are written again from it, PostgreSQL's generated
`search_vector` follows the column. Each batch is its own transaction, so a live install
keeps answering while this runs.
"""
import importlib

from django.db import migrations, transaction

BATCH = 1000
SEARCH_TABLE = "memory_app_memory_fts"

_history = importlib.import_module("sessions_app.migrations.0020_message_search_arabic_hebrew")


def search_text(content: str) -> str | None:
    """A memory's search text from this migration on: None when it is the content itself."""
    text = _history.search_text(content)
    return None if text == content else text


def search_text_before(content: str) -> str | None:
    """A memory's search text as migrations 0010 and 0011 left it."""
    text = _history.search_text_before(content)
    return None if text == content else text


def _write(apps, schema_editor, text_of) -> None:
    """Every memory holding such signs or letters gets `text_of(content)` as its search text, in
    batches; on SQLite its FTS5 entry too."""
    Memory = apps.get_model("memory_app", "Memory")
    db = schema_editor.connection.alias
    last = 0
    while True:
        # Ordered by id from the last one seen: each batch starts where the last ended.
        batch = list(Memory.objects.using(db).filter(pk__gt=last, content__regex=_history.CHANGED)
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
    _write(apps, schema_editor, search_text_before)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("memory_app", "0011_memory_search_marks_in_words"),
        ("sessions_app", "0020_message_search_arabic_hebrew"),  # its search text, imported above
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
