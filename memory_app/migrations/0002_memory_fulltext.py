"""Full-text search over memories, per database.

PostgreSQL: a stored generated `search_vector` column (`to_tsvector('english', content)`)
with a GIN index. The model does not declare it (SQLite could not have it), so the ORM
never writes it and PostgreSQL keeps it current on every insert and update.

SQLite: an FTS5 table keyed by the memory's id, holding an owner token and the content,
written by memory_app.services (not by triggers: Django rebuilds a SQLite table to alter
it, which would silently drop them).
"""
from django.db import migrations

PG_FORWARD = [
    "ALTER TABLE memory_app_memory ADD COLUMN search_vector tsvector"
    " GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
    "CREATE INDEX memory_search_vector_gin ON memory_app_memory USING gin (search_vector)",
]
PG_BACKWARD = [
    "DROP INDEX IF EXISTS memory_search_vector_gin",
    "ALTER TABLE memory_app_memory DROP COLUMN IF EXISTS search_vector",
]
SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE memory_app_memory_fts USING fts5("
    "owner, content, tokenize = 'porter unicode61 remove_diacritics 2')",
    # Memories stored before this migration: the owner token is t<tenant>q<qor>u<user or x>.
    "INSERT INTO memory_app_memory_fts (rowid, owner, content)"
    " SELECT id, 't' || tenant_id || 'q' || qor_id || 'u' || COALESCE(user_id, 'x'), content"
    " FROM memory_app_memory",
]
SQLITE_BACKWARD = ["DROP TABLE IF EXISTS memory_app_memory_fts"]


def _run(statements: dict[str, list[str]]):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('memory_app', '0001_initial'),
    ]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": PG_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        ),
    ]
