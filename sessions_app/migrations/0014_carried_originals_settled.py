"""The archived original of a message a rotation carried into a fresh conversation
(`carried_to`) no longer waits for an answer: its copy is what is answered. Rotations
before this version left it `pending` for good, as if still unanswered."""
from __future__ import annotations

from django.db import migrations


def settle_originals(apps, schema_editor) -> None:
    Message = apps.get_model("sessions_app", "Message")
    # The partial index of pending messages (migration 0004) keeps this read small.
    Message.objects.filter(answer_state="pending", metadata__has_key="carried_to").update(
        answer_state=None, answer_attempts=None)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0013_moved_thread"),
    ]

    operations = [
        migrations.RunPython(settle_originals, migrations.RunPython.noop),
    ]
