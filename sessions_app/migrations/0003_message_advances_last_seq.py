"""SQLite: inserting a message advances its session's last_seq, in the same statement.

An append on SQLite is one `INSERT … SELECT last_seq + 1 …` (see
sessions_app.append_statement); this trigger moves the session's counter along with it, so
the statement is the whole transaction. It only ever moves last_seq forward, so bulk
inserts (collapse, legacy import) that set last_seq themselves are unaffected.
PostgreSQL needs no trigger: its append statement updates the session row in a CTE.

SQLite drops a table's triggers when Django rebuilds the table, so a later migration
that alters Message must run CREATE_TRIGGER again (without it every second append fails
on the unique seq, which the tests in tests/sessions_app/test_append.py catch at once).
"""
from django.db import migrations

TRIGGER = "message_advances_session_last_seq"
CREATE_TRIGGER = f"""
CREATE TRIGGER IF NOT EXISTS {TRIGGER} AFTER INSERT ON sessions_app_message
BEGIN
    UPDATE sessions_app_session SET last_seq = NEW.seq
    WHERE id = NEW.session_id AND last_seq < NEW.seq;
END
"""
DROP_TRIGGER = f"DROP TRIGGER IF EXISTS {TRIGGER}"


def _on_sqlite(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0002_message_fk_indexes"),
    ]

    operations = [
        migrations.RunPython(_on_sqlite(CREATE_TRIGGER), _on_sqlite(DROP_TRIGGER)),
    ]
