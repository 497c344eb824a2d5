"""Memory search on SQLite reads the marks written in a word (the vowel signs and viramas
of Hindi, Bengali, Tamil and the other Indic scripts; Arabic and Hebrew vowel points) as
part of it, as PostgreSQL's parser does: the FTS5 table is made again with unicode61
taking marks (categories M*) for letters, as history search's (sessions_app 0019).

SQLite: the delete trigger (migration 0005) is dropped with the table and made again with
it, then the new table is filled from the memories' search text, in batches of 10,000
ids, each its own transaction (a memory written meanwhile is indexed by its service, and
written again by its batch, the same). PostgreSQL: nothing.
"""
import importlib

from django.db import migrations

from ._trigger import DELETE_SQLITE, DELETE_TRIGGER, SEARCH_TABLE

_history = importlib.import_module("sessions_app.migrations.0019_message_search_marks_in_words")
TOKENIZE, TOKENIZE_BEFORE = _history.TOKENIZE, _history.TOKENIZE_BEFORE
FILL = (
    f"INSERT OR REPLACE INTO {SEARCH_TABLE} (rowid, owner, content)"
    " SELECT id, 't' || tenant_id || 'q' || qor_id || 'u' || COALESCE(user_id, 'x'), COALESCE(search_text, content)"
    " FROM memory_app_memory WHERE id > %s AND id <= %s"
)


def _made_again(schema_editor, tokenize: str) -> None:
    if schema_editor.connection.vendor == "sqlite":
        _history.fts_made_again(schema_editor.connection, table=SEARCH_TABLE, tokenize=tokenize,
                                triggers={DELETE_TRIGGER: DELETE_SQLITE}, rows="memory_app_memory", fill=FILL)


def forward(apps, schema_editor) -> None:
    _made_again(schema_editor, TOKENIZE)


def backward(apps, schema_editor) -> None:
    _made_again(schema_editor, TOKENIZE_BEFORE)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("memory_app", "0010_memory_search_accents_korean"),
        ("sessions_app", "0019_message_search_marks_in_words"),  # its table's making, imported above
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
