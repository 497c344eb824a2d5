"""The SQLite trigger of migration 0003, for migrations that must make sure it exists."""
from __future__ import annotations

CREATE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS message_advances_session_last_seq AFTER INSERT ON sessions_app_message
BEGIN
    UPDATE sessions_app_session SET last_seq = NEW.seq
    WHERE id = NEW.session_id AND last_seq < NEW.seq;
END
"""


def create_on_sqlite(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(CREATE_TRIGGER)
