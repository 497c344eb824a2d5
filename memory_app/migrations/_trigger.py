"""The SQLite trigger that drops a memory's search entry when its row goes (migration
0005). Django rebuilds a SQLite table to alter it, which drops its triggers: a later
migration that alters memory_app_memory ends with RunPython(create_on_sqlite), and the
database check memory_app.E001 says so when the trigger is missing."""
from __future__ import annotations

SEARCH_TABLE = "memory_app_memory_fts"
DELETE_TRIGGER = "memory_search_delete"
# The migration that first creates it: a database not migrated that far has none to miss.
DELETE_MIGRATION = "0005_memory_search_follows_deletes"
# Every way a row goes (a cascade from a deleted tenant, Qor or user, a queryset, plain
# SQL) fires it: the index keeps no copy of a deleted memory's text.
DELETE_SQLITE = f"""
CREATE TRIGGER IF NOT EXISTS {DELETE_TRIGGER} AFTER DELETE ON memory_app_memory
BEGIN
    DELETE FROM {SEARCH_TABLE} WHERE rowid = OLD.id;
END
"""


def create_on_sqlite(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(DELETE_SQLITE)
