"""The SQLite triggers on the messages table (migrations 0003, 0005, 0008 and 0010), for migrations
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
# What the index reads of a message: its text with the letters of Chinese, Japanese and
# Thai spaced out (sessions_app.fulltext.search_text), so each is a word to the index. A
# function of each connection on SQLite (sessions_app.search registers it), an IMMUTABLE
# SQL function on PostgreSQL (migration 0010); the same name on both.
SEARCH_TEXT_FUNCTION = "message_search_text"
_INDEXED = "NEW.role IN ('user', 'assistant') AND NEW.content <> ''"
_OWNER = ("(SELECT 't' || tenant_id || 'q' || qor_id || 'u' || COALESCE(user_id, 'x')"
          " FROM sessions_app_session WHERE id = NEW.session_id)")


def search_triggers(text: str) -> dict[str, str]:
    """The search triggers, indexing `text` (SQL over the new row) for each message people
    read: user and assistant text (not tool rows or notices)."""
    return {
        "message_search_insert": f"""
CREATE TRIGGER IF NOT EXISTS message_search_insert AFTER INSERT ON sessions_app_message WHEN {_INDEXED}
BEGIN
    INSERT INTO {SEARCH_TABLE} (rowid, owner, content) VALUES (NEW.id, {_OWNER}, {text});
END
""",
        "message_search_update": f"""
CREATE TRIGGER IF NOT EXISTS message_search_update AFTER UPDATE OF content, role ON sessions_app_message
BEGIN
    DELETE FROM {SEARCH_TABLE} WHERE rowid = OLD.id;
    INSERT INTO {SEARCH_TABLE} (rowid, owner, content) SELECT NEW.id, {_OWNER}, {text} WHERE {_INDEXED};
END
""",
        "message_search_delete": f"""
CREATE TRIGGER IF NOT EXISTS message_search_delete AFTER DELETE ON sessions_app_message
BEGIN
    DELETE FROM {SEARCH_TABLE} WHERE rowid = OLD.id;
END
""",
    }


# As migration 0010 left them, the ones a rebuilt table gets again.
SEARCH_TRIGGERS = search_triggers(f"{SEARCH_TEXT_FUNCTION}(NEW.content)")


# Every UPDATE of a message moves its revision on (sessions_app.models.Message.revision).
# The trigger's own UPDATE does not fire it again: SQLite's recursive_triggers is off.
REVISION_TRIGGER = "message_revision_moves_on"
REVISION_SQLITE = f"""
CREATE TRIGGER IF NOT EXISTS {REVISION_TRIGGER} AFTER UPDATE ON sessions_app_message
BEGIN
    UPDATE sessions_app_message SET revision = COALESCE(OLD.revision, 0) + 1 WHERE id = NEW.id;
END
"""
REVISION_POSTGRESQL = f"""
CREATE OR REPLACE FUNCTION {REVISION_TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.revision := COALESCE(OLD.revision, 0) + 1;
    RETURN NEW;
END
$$;
CREATE TRIGGER {REVISION_TRIGGER} BEFORE UPDATE ON sessions_app_message
FOR EACH ROW EXECUTE FUNCTION {REVISION_TRIGGER}();
"""


def create_on_sqlite(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(CREATE_TRIGGER)


def create_all_on_sqlite(apps, schema_editor) -> None:
    """Every trigger of the messages table on SQLite, the revision's included (migration
    0008 on); the revision's trigger survives a table rebuild on PostgreSQL."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(CREATE_TRIGGER)
        for sql in SEARCH_TRIGGERS.values():
            schema_editor.execute(sql)
        schema_editor.execute(REVISION_SQLITE)
