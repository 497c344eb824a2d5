"""Marks the archived original of every message a rotation carried into a fresh
conversation (`carried_to`, as sessions_app.services.session_rotate now does), so
history search finds the copy alone, for messages carried before this version too."""
from __future__ import annotations

from django.db import migrations

BATCH = 500


def mark_originals(apps, schema_editor) -> None:
    Message = apps.get_model("sessions_app", "Message")
    copies = (Message.objects.filter(metadata__has_key="carried_from").order_by("pk")
              .values_list("session_id", "seq", "metadata"))
    for session_id, seq, metadata in copies.iterator(chunk_size=BATCH):
        source = metadata.get("carried_from") if isinstance(metadata, dict) else None
        if not isinstance(source, dict):
            continue
        original = Message.objects.filter(session_id=source.get("session"), seq=source.get("seq")).first()
        if original is None or "carried_to" in (original.metadata or {}):
            continue
        original.metadata = {**(original.metadata or {}), "carried_to": {"session": session_id, "seq": seq}}
        original.save(update_fields=["metadata"])


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0011_image_text"),
    ]

    operations = [
        migrations.RunPython(mark_originals, migrations.RunPython.noop),
    ]
