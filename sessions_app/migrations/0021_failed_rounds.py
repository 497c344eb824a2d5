"""Marks the tool calls and results stored for a message that failed (`failed_round`, as
sessions_app.services.message_answer_fail now does), so they are left out of later prompts
with it, for messages that failed before this version too.

A round is an assistant or tool row after the failed message in its session that names it
(`reply_to`: the failed message's seq, as a JSON number), and is neither a notice, nor
superseded, nor marked already. One UPDATE per database, reading the messages table once:
each row that may be a round looks its failed message up by (session, seq), the unique
index (SQLite), or is joined to the failed messages in one sorted pass (PostgreSQL). Reading
the rest of the session after each failed message, as this did first, took a time growing
with the square of a conversation's length: 13 s (SQLite) and 21 s (PostgreSQL) for a
million messages in sessions of 10,000, 2 and 3 minutes in sessions of 100,000; now 2-4 s
(docs/performance.md, "Upgrading a large install")."""
from __future__ import annotations

from django.db import migrations

MESSAGES = "sessions_app_message"
SQL = {
    "postgresql": f"""
UPDATE {MESSAGES} AS r SET metadata = r.metadata || '{{"failed_round": true}}'::jsonb
FROM {MESSAGES} AS f
WHERE f.answer_state = 'failed' AND f.session_id = r.session_id AND f.seq < r.seq
  AND r.metadata -> 'reply_to' = to_jsonb(f.seq)
  AND r.role IN ('assistant', 'tool')
  AND NOT r.metadata ?| ARRAY['notice', 'superseded', 'failed_round']
""",
    # A reply_to of text ("11") names no message: the type check keeps SQLite from
    # reading it as the number the seq column's affinity would make of it.
    "sqlite": f"""
UPDATE {MESSAGES} AS r SET metadata = json_set(r.metadata, '$.failed_round', json('true'))
WHERE r.role IN ('assistant', 'tool')
  AND json_type(r.metadata, '$.reply_to') IN ('integer', 'real')
  AND json_type(r.metadata, '$.notice') IS NULL
  AND json_type(r.metadata, '$.superseded') IS NULL
  AND json_type(r.metadata, '$.failed_round') IS NULL
  AND EXISTS (SELECT 1 FROM {MESSAGES} AS f
              WHERE f.session_id = r.session_id AND f.seq = json_extract(r.metadata, '$.reply_to')
                AND f.seq < r.seq AND f.answer_state = 'failed')
""",
}


def mark_rounds(apps, schema_editor) -> None:
    schema_editor.execute(SQL[schema_editor.connection.vendor])


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0020_message_search_arabic_hebrew"),
    ]

    operations = [
        migrations.RunPython(mark_rounds, migrations.RunPython.noop),
    ]
