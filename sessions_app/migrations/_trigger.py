"""The SQLite triggers on the messages table (migrations 0003 and 0005), for migrations
that must make sure they exist after rebuilding the table: end such a migration with
RunPython(create_all_on_sqlite). (`create_on_sqlite`, the last_seq trigger alone, is what
migration 0004 ran, before the search table existed.)"""
from __future__ import annotations

CREATE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS message_advances_session_last_seq AFTER INSERT ON sessions_app_message
BEGIN
    UPDATE sessions_app_session SET last_seq = NEW.seq
    WHERE id = NEW.session_id AND last_seq < NEW.seq;
END
"""

SEARCH_TABLE = "sessions_app_message_fts"
_INDEXED = "NEW.role IN ('user', 'assistant') AND NEW.content <> ''"
_OWNER = ("(SELECT 't' || tenant_id || 'q' || qor_id || 'u' || COALESCE(user_id, 'x')"
          " FROM sessions_app_session WHERE id = NEW.session_id)")
# What people read is searchable: user and assistant text (not tool rows or notices).
SEARCH_TRIGGERS = {
    "message_search_insert": f"""
CREATE TRIGGER IF NOT EXISTS message_search_insert AFTER INSERT ON sessions_app_message WHEN {_INDEXED}
BEGIN
    INSERT INTO {SEARCH_TABLE} (rowid, owner, content) VALUES (NEW.id, {_OWNER}, NEW.content);
END
""",
    "message_search_update": f"""
CREATE TRIGGER IF NOT EXISTS message_search_update AFTER UPDATE OF content, role ON sessions_app_message
BEGIN
    DELETE FROM {SEARCH_TABLE} WHERE rowid = OLD.id;
    INSERT INTO {SEARCH_TABLE} (rowid, owner, content) SELECT NEW.id, {_OWNER}, NEW.content WHERE {_INDEXED};
END
""",
    "message_search_delete": f"""
CREATE TRIGGER IF NOT EXISTS message_search_delete AFTER DELETE ON sessions_app_message
BEGIN
    DELETE FROM {SEARCH_TABLE} WHERE rowid = OLD.id;
END
""",
}


def create_on_sqlite(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(CREATE_TRIGGER)


def create_all_on_sqlite(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(CREATE_TRIGGER)
        for sql in SEARCH_TRIGGERS.values():
            schema_editor.execute(sql)
