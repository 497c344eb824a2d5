"""Memory search on SQLite reads the marks written in a word (the vowel signs and viramas
of Hindi, Bengali, Tamil and the other Indic scripts; Arabic and Hebrew vowel points) as
part of it, as PostgreSQL's parser does: the FTS5 table is made again with unicode61
taking marks (categories M*) for letters, as history search's (sessions_app 0019).

SQLite: the delete trigger (migration 0005) is dropped with the table and made again with
it, then the new table is filled from the memories' search text, in batches of BATCH
ids, each its own transaction (a memory written meanwhile is indexed by its service, and
written again by its batch, the same). PostgreSQL: nothing.
"""
from django.db import migrations, transaction

from ._trigger import DELETE_SQLITE, DELETE_TRIGGER, SEARCH_TABLE

BATCH = 10_000
TOKENIZE = "porter unicode61 remove_diacritics 2 categories ''L* N* Co M*''"
TOKENIZE_BEFORE = "porter unicode61 remove_diacritics 2"
OWNER = "'t' || tenant_id || 'q' || qor_id || 'u' || COALESCE(user_id, 'x')"


def _made_again(apps, schema_editor, tokenize: str) -> None:
    connection = schema_editor.connection
    if connection.vendor != "sqlite":
        return
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS {DELETE_TRIGGER}")
        cursor.execute(f"DROP TABLE IF EXISTS {SEARCH_TABLE}")
        cursor.execute(f"CREATE VIRTUAL TABLE {SEARCH_TABLE} USING fts5(owner, content, tokenize = '{tokenize}')")
        cursor.execute(DELETE_SQLITE)
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM memory_app_memory")
        last = cursor.fetchone()[0]
    for first in range(0, last, BATCH):
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT OR REPLACE INTO {SEARCH_TABLE} (rowid, owner, content)"
                f" SELECT id, {OWNER}, COALESCE(search_text, content) FROM memory_app_memory"
                " WHERE id > %s AND id <= %s",
                [first, first + BATCH],
            )


def forward(apps, schema_editor) -> None:
    _made_again(apps, schema_editor, TOKENIZE)


def backward(apps, schema_editor) -> None:
    _made_again(apps, schema_editor, TOKENIZE_BEFORE)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("memory_app", "0010_memory_search_accents_korean"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
