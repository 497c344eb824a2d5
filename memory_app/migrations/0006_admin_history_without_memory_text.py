"""The admin's history (django_admin_log) named a memory by its type and text (`fact:
Alice's therapy notes…`) and kept that name after the memory was erased. Existing entries
take the name memories now have (`fact #12`)."""
from django.db import migrations


def names_without_text(apps, schema_editor) -> None:
    LogEntry = apps.get_model("admin", "LogEntry")
    ContentType = apps.get_model("contenttypes", "ContentType")
    kind = ContentType.objects.filter(app_label="memory_app", model="memory").first()
    if kind is None:
        return
    changed = []
    for entry in LogEntry.objects.filter(content_type=kind, object_repr__contains=":").only(
            "pk", "object_id", "object_repr").iterator():
        entry.object_repr = f"{entry.object_repr.partition(':')[0]} #{entry.object_id}"
        changed.append(entry)
    LogEntry.objects.bulk_update(changed, ["object_repr"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("memory_app", "0005_memory_search_follows_deletes"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(names_without_text, migrations.RunPython.noop),
    ]
