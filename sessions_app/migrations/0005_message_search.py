"""Full-text search over the conversation (the chat page's history search).

PostgreSQL: a GIN expression index on `to_tsvector('english', content)` of the messages
people read (user and assistant rows), built CONCURRENTLY so a long messages table stays
writable meanwhile. The selector repeats the expression exactly, so the index serves it.

SQLite: an FTS5 table keyed by the message id, holding the owner token of its session
(t<tenant>q<qor>u<user>, as memory search uses) and the text, kept current by triggers on
the messages table. Appends stay one statement (sessions_app.append_statement), which is
why this is a trigger and not a second write in the service; like migration 0003's
trigger, a later migration that rebuilds the table must create them again (_trigger.py),
and the database check sessions_app.E001 says so when they are missing.
"""
from django.db import migrations

from ._trigger import SEARCH_TABLE, search_triggers

# The message's text as it is (migration 0010 spaces out Chinese, Japanese and Thai).
SEARCH_TRIGGERS = search_triggers("NEW.content")

PG_FORWARD = [
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS message_search_gin ON sessions_app_message"
    " USING gin (to_tsvector('english'::regconfig, content)) WHERE role IN ('user', 'assistant')",
]
PG_BACKWARD = ["DROP INDEX CONCURRENTLY IF EXISTS message_search_gin"]
SQLITE_FORWARD = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {SEARCH_TABLE} USING fts5("
    "owner, content, tokenize = 'porter unicode61 remove_diacritics 2')",
    *SEARCH_TRIGGERS.values(),
    # What was said before this migration.
    f"INSERT INTO {SEARCH_TABLE} (rowid, owner, content)"
    " SELECT m.id, 't' || s.tenant_id || 'q' || s.qor_id || 'u' || COALESCE(s.user_id, 'x'), m.content"
    " FROM sessions_app_message m JOIN sessions_app_session s ON s.id = m.session_id"
    " WHERE m.role IN ('user', 'assistant') AND m.content <> ''",
]
SQLITE_BACKWARD = [*(f"DROP TRIGGER IF EXISTS {name}" for name in SEARCH_TRIGGERS),
                   f"DROP TABLE IF EXISTS {SEARCH_TABLE}"]


def _run(statements: dict[str, list[str]]):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("sessions_app", "0004_message_answer_state"),
    ]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": PG_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        ),
    ]
