"""Marks the tool calls and results stored for a message that failed (`failed_round`, as
sessions_app.services.message_answer_fail now does), so they are left out of later prompts
with it, for messages that failed before this version too."""
from __future__ import annotations

from django.db import migrations

BATCH = 500


def mark_rounds(apps, schema_editor) -> None:
    Message = apps.get_model("sessions_app", "Message")
    failed = Message.objects.filter(answer_state="failed").order_by("pk").values_list("session_id", "seq")
    for session_id, seq in failed.iterator(chunk_size=BATCH):
        rounds = (Message.objects.filter(session_id=session_id, seq__gt=seq, metadata__reply_to=seq,
                                         role__in=["assistant", "tool"])
                  .exclude(metadata__has_key="notice").exclude(metadata__has_key="superseded")
                  .exclude(metadata__has_key="failed_round"))
        for row in rounds:
            row.metadata = {**(row.metadata or {}), "failed_round": True}
            row.save(update_fields=["metadata"])


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0020_message_search_arabic_hebrew"),
    ]

    operations = [
        migrations.RunPython(mark_rounds, migrations.RunPython.noop),
    ]
